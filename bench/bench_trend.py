"""Benchmark: ``dlperf results trend`` over 365 archived nightly runs in a real S3 server.

Starts a throw-away SeaweedFS S3 server (tests/fixtures/s3.py, loopback only), publishes 365
synthetic nightly runs of one suite through the real publish path (result.json + report.md;
per-trial noise 1.5 %), then times the CLI as a user runs it (a fresh ``python -m
dlperf_tasks results trend --suite mxnet-bert --cell 4n8g/bz32/fp32`` process, imports
included), with and without ``--png``, 5 times each. Goal: < 2 s. Prints the figures and
exits 1 if the median is over the goal.

    .venv/bin/python bench/bench_trend.py [--runs 365] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_S = 2.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=365)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from tests.fixtures import synth
    from dlperf_tasks.store.store import Store
    from tests.fixtures.s3 import SeaweedS3

    with tempfile.TemporaryDirectory(prefix="bench-trend-") as tmp:
        srv = SeaweedS3(Path(tmp) / "s3")
        srv.start()
        try:
            os.environ.update(srv.env())
            url = srv.store_url()
            store = Store.from_url(url)
            t0 = time.perf_counter()
            results = synth.nightly_results(args.runs)
            synth.seed_store(store, results, str(Path(tmp) / "runs"), report=True)
            seed_s = time.perf_counter() - t0
            index_bytes = len(store.backend.get_bytes(store.layout.index_key("mxnet-bert"))[0])
            print(f"seeded {args.runs} runs into {url.split('?')[0]} in {seed_s:.1f} s "
                  f"(index/mxnet-bert.json: {index_bytes / 1024:.0f} KiB)")

            env = dict(os.environ, DLPERF_STORE_URL=url)
            base = [sys.executable, "-m", "dlperf_tasks", "results", "trend", "--suite", "mxnet-bert",
                    "--cell", "4n8g/bz32/fp32", "--format", "json"]
            figures = {}
            for label, extra in (("table", []), ("table+png", ["--png", str(Path(tmp) / "trend.png")])):
                times = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    p = subprocess.run(base + extra, cwd=ROOT, env=env, capture_output=True, text=True)
                    times.append(time.perf_counter() - t)
                    if p.returncode != 0:
                        print(p.stderr, file=sys.stderr)
                        return 2
                n = len(json.loads(p.stdout)["points"])
                assert n == args.runs, f"trend returned {n} points, expected {args.runs}"
                figures[label] = (statistics.median(times), min(times), max(times))
            for label, (med, lo, hi) in figures.items():
                print(f"dlperf results trend ({label}) over {args.runs} runs: median {med:.2f} s "
                      f"(min {lo:.2f}, max {hi:.2f}, n={args.repeat}); goal < {GOAL_S:.0f} s: "
                      f"{'OK' if med < GOAL_S else 'OVER'}")
            return 0 if all(m < GOAL_S for m, _, _ in figures.values()) else 1
        finally:
            srv.stop()


if __name__ == "__main__":
    sys.exit(main())
