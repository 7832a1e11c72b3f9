"""Render rows (list of dicts) as an aligned text table, JSON or CSV (``--format``)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Iterable, Mapping, Sequence

FORMATS = ("table", "json", "csv")


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.2f}" if abs(v) >= 10 else f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ",".join(_cell(x) for x in v)
    return str(v)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    body = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(b, widths)).rstrip() for b in body]
    return "\n".join(lines)


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    buf = io.StringIO()
    cols = list(columns or (rows[0].keys() if rows else []))
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: (json.dumps(r.get(c)) if isinstance(r.get(c), (list, dict)) else r.get(c)) for c in cols})
    return buf.getvalue().rstrip("\n")


def render(rows: Iterable[Mapping[str, Any]], fmt: str, columns: Sequence[str] | None = None,
           doc: Any = None) -> str:
    """``doc`` (if given) is what JSON output prints instead of the bare rows."""
    rows = list(rows)
    if fmt == "json":
        return json.dumps(doc if doc is not None else rows, indent=2, default=str)
    if fmt == "csv":
        return to_csv(rows, columns)
    if fmt == "table":
        return table(rows, columns)
    raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
