"""``dlperf results export --format openmetrics|conbench|bencher``: the runs named (or every run
of ``--suite``) read from the store and written in that format (:mod:`.export_formats`)."""

from __future__ import annotations

import os
import sys
from typing import Callable

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.export_formats import clean_text, render
from dlperf_tasks.history.source import resolve_run


def _control(c: str) -> bool:
    o = ord(c)
    return o < 32 or 127 <= o < 160 or 0xD800 <= o <= 0xDFFF


def export_runs(args, fmt: str, store, say: Callable[[str], None]) -> int:
    if args.runs:
        run_ids = [resolve_run(store, r, suite=args.suite) for r in args.runs]
    elif args.suite:
        # oldest first (the index's order)
        run_ids = [s["run_id"] for s in store.list_runs(suite=args.suite, since=args.since) if s.get("run_id")]
    else:
        raise DlperfError("export: name the RUN(s) to export (a run id, a prefix or 'latest'), or --suite")
    if not run_ids:
        raise DlperfError(f"nothing to export: suite {args.suite!r} has no runs in the store"
                          + (f" since {args.since}" if args.since else ""))
    notes: list[str] = []
    text = render([store.read_result(r) for r in run_ids], fmt, timestamps=not args.no_timestamps, notes=notes)
    # every format is ASCII-safe by construction; this keeps a terminal or a file safe regardless
    text = "".join(c if c == "\n" or not _control(c) else clean_text(c) for c in text)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    if not args.out:
        sys.stdout.write(text)
        return 0
    parent = os.path.dirname(args.out)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    say(f"{len(run_ids)} run(s) written to {args.out} ({fmt})")
    return 0
