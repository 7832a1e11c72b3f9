"""Benchmark: start-up of the ``dlperf`` command (fresh processes, one core): ``dlperf --version`` and
``dlperf extract`` up to its first error (a missing log directory: imports, the parser, the suite).

    .venv/bin/python bench/bench_startup.py [--runs 15] [--json PATH]

Reported: median wall and CPU seconds per command, beside a bare ``python -c pass``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine, save_json, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DLPERF = str(Path(sys.executable).with_name("dlperf"))
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "dlperf --version": [DLPERF, "--version"],
    "dlperf extract (no such dir)": [DLPERF, "extract", "--suite", "pytorch-bert", "--log-dir", "/nonexistent"],
}


def once(argv: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    _, _, usage = os.wait4(p.pid, 0)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per command, alternated (default 15)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for argv_ in COMMANDS.values():
        once(argv_)  # warm the page and byte-code caches
    for _ in range(a.runs):
        for name, argv_ in COMMANDS.items():
            runs[name].append(once(argv_))
    out = {name: {"wall_s": statistics.median(w for w, _ in r), "cpu_s": statistics.median(c for _, c in r)}
           for name, r in runs.items()}
    print(f"start-up, median of {a.runs} alternated runs on one core ({machine()}, load {os.getloadavg()[0]:.1f})")
    print(table(["command", "wall s", "CPU s"], [[n, f"{v['wall_s']:.3f}", f"{v['cpu_s']:.3f}"] for n, v in out.items()]))
    save_json(a.json, {"machine": machine(), "runs": a.runs, "commands": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
