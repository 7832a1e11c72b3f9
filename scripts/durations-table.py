"""Where the suite's time goes, per test file: reads the output of ``pytest --durations=0`` (a file
or stdin) and prints a Markdown table of the files over a threshold, slowest first, with the
setup/call/teardown seconds summed per file (what docs/developers.md's table is made from).

    .venv/bin/python -m pytest tests --durations=0 ... | tee /tmp/suite.log
    .venv/bin/python scripts/durations-table.py /tmp/suite.log --min 20
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S+?)::")


def per_file(lines) -> dict[str, float]:
    total: dict[str, float] = collections.defaultdict(float)
    for line in lines:
        m = LINE.match(line)
        if m:
            total[m.group(3)] += float(m.group(1))
    return dict(total)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", help="pytest output with --durations=0 (default: stdin)")
    ap.add_argument("--min", type=float, default=20.0, help="leave out files under this many seconds")
    args = ap.parse_args(argv)
    with (open(args.log, encoding="utf-8", errors="replace") if args.log else sys.stdin) as f:
        totals = per_file(f)
    if not totals:
        print("durations-table: no '--durations=0' lines found", file=sys.stderr)
        return 1
    shown = sorted(((s, p) for p, s in totals.items() if s >= args.min), reverse=True)
    print("| test file | seconds |\n| --- | ---: |")
    for s, p in shown:
        print(f"| `{p}` | {s:.0f} |")
    rest = sum(totals.values()) - sum(s for s, _ in shown)
    print(f"| {len(totals) - len(shown)} other files | {rest:.0f} |")
    print(f"| **all files (summed over workers)** | **{sum(totals.values()):.0f}** |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
