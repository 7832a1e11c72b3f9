"""Benchmark: publish cost per file at 1,000 and at 8,000 small logs (issue 38.6).

For each count N, builds a run directory (tests/fixtures/s3.make_run_dir) holding N extra small
logs (one line each), then publishes it to a fresh local store (``file://``) through the real
publish path (redaction, leak scan, spool, manifest, index) in a fresh Python process, and
reports the CPU and wall time per file. Goal: the per-file CPU cost at the largest count is at
most 1.3x the cost at the smallest (publish stays linear in the number of files).

    .venv/bin/python bench/bench_publish_scale.py [--counts 1000,8000] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import goal, machine, run_worker, save_json, table, worker_main  # noqa: E402

GOAL_RATIO = 1.3


def _work(payload: dict) -> dict:
    from dlperf_tasks.store import Store
    from tests.fixtures.s3 import make_run_dir

    n = int(payload["n"])
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as tmp:
        rd = make_run_dir(Path(tmp) / "work", log_lines=1)
        logs = rd / "logs" / "gpu-node-a"
        for i in range(n):
            (logs / f"extra_{i:05d}.log").write_text(f"step {i} loss 1.{i % 97:02d}\n")
        store = Store.from_url(f"file://{Path(tmp) / 'store'}")
        c0, t0 = time.process_time(), time.perf_counter()
        res = store.publish(rd)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return {"n": n, "objects": len(res.uploaded), "cpu_s": cpu, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if worker_main(argv, _work):
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1000,8000", help="comma-separated numbers of small logs")
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]

    rows, figures = [], []
    for n in counts:
        r = run_worker(__file__, {"n": n})
        r["cpu_ms_per_file"] = 1000 * r["cpu_s"] / n
        r["wall_ms_per_file"] = 1000 * r["wall_s"] / n
        figures.append(r)
        rows.append([n, r["objects"], f"{r['cpu_s']:.2f}", f"{r['wall_s']:.2f}",
                     f"{r['cpu_ms_per_file']:.3f}", f"{r['wall_ms_per_file']:.3f}", r["peak_rss_mib"]])
    load = os.getloadavg()[0]
    print(f"machine: {machine()}, load average {load:.1f}")
    print(table(["logs", "objects", "CPU s", "wall s", "CPU ms/file", "wall ms/file", "peak RSS MiB"], rows))
    ratio = figures[-1]["cpu_ms_per_file"] / figures[0]["cpu_ms_per_file"]
    wall_ratio = figures[-1]["wall_ms_per_file"] / figures[0]["wall_ms_per_file"]
    print(f"per-file cost at {counts[-1]} / at {counts[0]}: CPU {ratio:.2f}x, wall {wall_ratio:.2f}x")
    print(goal("publish per-file CPU ratio", ratio, GOAL_RATIO, unit="x"))
    save_json(args.json, {"figures": figures, "cpu_ratio": ratio, "wall_ratio": wall_ratio, "load": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
