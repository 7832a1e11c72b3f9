"""Benchmark: parsing time per MiB of hostile MXNet BERT logs (lines that repeat a step record or one of
its fields many times), on the compiled and the pure-Python path, against a bound in CPU seconds per MiB.

    .venv/bin/python bench/bench_parse_linear.py [--mib 4] [--json PATH]

Each pattern fills ``--mib`` MiB with lines of one length (256 B to 256 KiB): a parser that backtracks
through the repeats costs time growing with the line length (quadratic in the line); a linear one costs
the same per MiB at every length. The goal: every pattern and length within ``BOUND_S_PER_MIB``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import goal, machine, save_json, table  # noqa: E402
from dlperf_tasks.frameworks import _native, get  # noqa: E402

#: CPU seconds per MiB a hostile log may cost (an ordinary MXNet BERT log costs ~0.01)
BOUND_S_PER_MIB = 0.25
RECORD = "[step 1]\tmlm_loss=1\tnsp_loss=1\tthroughput=1 latency=1 "
PATTERNS = {
    "step record repeated": lambda n: (RECORD * (n // len(RECORD) + 1))[:n],
    "latency= repeated": lambda n: ("[step 1] mlm_loss=1 nsp_loss=1 throughput=" + "latency=" * (n // 8 + 1))[:n],
    "step record, then text": lambda n: (RECORD + "x" * n)[:n],
}
LENGTHS = (256, 2048, 64 * 1024, 256 * 1024)


def cpu_per_mib(text: str) -> float:
    stream = get("mxnet_bert").stream()
    t0 = time.process_time()
    for i in range(0, len(text), 1 << 20):
        stream.feed(text[i:i + (1 << 20)])
    stream.close()
    return (time.process_time() - t0) / (len(text) / (1 << 20))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=4.0, help="MiB of each hostile log (default 4)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    compiled = _native.mxbert_scan
    rows, worst, results = [], 0.0, {}
    for name, make in PATTERNS.items():
        for length in LENGTHS:
            line = make(length)
            text = "\n".join([line] * max(1, int(a.mib * (1 << 20)) // (length + 1))) + "\n"
            got = {}
            for path in ("compiled", "python"):
                _native.mxbert_scan = compiled if path == "compiled" else None
                got[path] = cpu_per_mib(text)
            _native.mxbert_scan = compiled
            worst = max(worst, *got.values())
            results[f"{name}/{length}"] = got
            rows.append([name, length, f"{got['compiled']:.3f}", f"{got['python']:.3f}"])
    print(f"MXNet BERT parser on hostile lines ({machine()}; compiled path: {'yes' if compiled else 'NOT BUILT'})")
    print(table(["pattern", "line bytes", "compiled CPU s/MiB", "python CPU s/MiB"], rows))
    print(goal("worst CPU s per MiB", worst, BOUND_S_PER_MIB, unit="s/MiB"))
    save_json(a.json, {"machine": machine(), "bound_s_per_mib": BOUND_S_PER_MIB, "worst": worst, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
