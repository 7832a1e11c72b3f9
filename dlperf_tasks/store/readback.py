"""What a published result may hold: only values every reader of the store can read back.

The suite index is read by a streaming parser (``store/index_stream.py``, yajl) that refuses an
integer beyond 64 bits, a string holding a lone surrogate (``"\\ud800"``) and a number beyond a
double (``1e400``); ``show``, ``compare`` and the page read the same values. One such value in
one run's row would make the whole suite's history unreadable, so publish refuses it in one line
(:func:`result_problem`), and the readers skip a row that holds one (:func:`row_problem`).

The shapes the index summary and the readers rely on are checked too: ``run`` and every cell and
trial are mappings, ``cells`` and ``trials`` are lists, speeds are numbers; nesting is bounded.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from dlperf_tasks.core.errors import StoreError

INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1
MAX_DEPTH = 32


def _where(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top)"


def value_problem(value: Any, path: tuple = ()) -> str | None:
    """The first value under ``value`` a reader cannot read back, as ``"<path>: <why>"``, or None."""
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if len(p) - len(path) > MAX_DEPTH:
            return f"{_where(p)}: nested deeper than {MAX_DEPTH} levels"
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            if not INT_MIN <= v <= INT_MAX:
                return f"{_where(p)}: an integer beyond 64 bits"
        elif isinstance(v, float):
            if not math.isfinite(v):
                return f"{_where(p)}: a number that is not finite (beyond a double, NaN or infinity)"
        elif isinstance(v, str):
            if _has_surrogate(v):
                return f"{_where(p)}: a string with a lone surrogate (not valid Unicode text)"
        elif isinstance(v, Mapping):
            for k, item in v.items():
                if not isinstance(k, str) or _has_surrogate(k):
                    return f"{_where(p)}: a key that is not valid Unicode text"
                stack.append((item, p + (k,)))
        elif isinstance(v, (list, tuple)):
            stack.extend((item, p + (i,)) for i, item in enumerate(v))
        else:
            return f"{_where(p)}: a {type(v).__name__}, not a JSON value"
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_NUMBERS = ("median_speed", "average_speed", "speedup", "value")


def shape_problem(result: Any) -> str | None:
    """Where ``result`` does not have the shape the summary and the readers rely on, or None."""
    if not isinstance(result, Mapping):
        return "(top): not a mapping"
    if not isinstance(result.get("run"), Mapping):
        return "run: not a mapping"
    run = result["run"]
    for key in ("cluster", "env", "window"):
        if run.get(key) is not None and not isinstance(run[key], Mapping):
            return f"run.{key}: not a mapping"
    nodes = (run.get("cluster") or {}).get("nodes")
    if nodes is not None and not isinstance(nodes, list):
        return "run.cluster.nodes: not a list"
    cells = result.get("cells")
    if cells is not None and not isinstance(cells, list):
        return "cells: not a list"
    for i, cell in enumerate(cells or []):
        if not isinstance(cell, Mapping):
            return f"cells[{i}]: not a mapping"
        if not isinstance(cell.get("trials", []), list):
            return f"cells[{i}].trials: not a list"
        for key in _NUMBERS:
            if not _number_or_none(cell.get(key)):
                return f"cells[{i}].{key}: not a number"
        for j, trial in enumerate(cell.get("trials") or []):
            if not isinstance(trial, Mapping):
                return f"cells[{i}].trials[{j}]: not a mapping"
            if not _number_or_none(trial.get("value")):
                return f"cells[{i}].trials[{j}].value: not a number"
    return None


def _number_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def result_problem(result: Any) -> str | None:
    """Why a result document cannot be published as it is (one phrase naming where), or None."""
    return value_problem(result) or shape_problem(result)


def shown_result(run_id: str, result: Any) -> dict:
    """``result`` as read back for display; one stored before publish checked its values (see
    :func:`result_problem`) is refused in one line naming the run and where."""
    problem = result_problem(result)
    if problem:
        raise StoreError(f"run {run_id}: its stored result cannot be shown ({problem})")
    return result


def row_problem(row: Any) -> str | None:
    """Why an index row cannot be used (it came from before publish checked, or from elsewhere)."""
    if not isinstance(row, Mapping):
        return "not a mapping"
    cells = row.get("cells", {})
    if not isinstance(cells, Mapping):
        return "cells: not a mapping"
    for cid, cell in cells.items():
        if not isinstance(cell, Mapping):
            return f"cells.{cid}: not a mapping"
        for key in _NUMBERS:
            if not _number_or_none(cell.get(key)):
                return f"cells.{cid}.{key}: not a number"
        values = cell.get("trial_values", [])
        if not isinstance(values, list) or not all(_number_or_none(v) for v in values):
            return f"cells.{cid}.trial_values: not a list of numbers"
    return value_problem(row)
