"""How a result JSON is written: the one layout (:func:`write_document`), with the per-sample
data streamed, not held.

:func:`dlperf_tasks.report.result_json.dumps` needs every trial's samples as row lists in one
document: for a large log tree that is most of the memory and a third of ``dlperf extract``'s time
(one list per sample, then a deep copy). Here each trial's samples are serialised once, as soon as
the trial is gated, into a spool file (:class:`SampleSpool`), and the trial keeps none; the
document is built with a placeholder per trial and written piece by piece, each placeholder
replaced by its bytes from the spool. Peak memory is then that of the largest trial, not the tree.

The text written is byte for byte what ``dumps(build_result(...))`` writes for the same trials
(tests/unit/test_result_stream.py compares them on a generated tree): indented, each trial's
``samples`` on one line, non-finite values as ``"NaN"``/``"Infinity"``/``"-Infinity"``.
No schema validation here: the document is built by our code, tests validate it, readers
(:func:`dlperf_tasks.report.result_json.load_result`) validate what they read.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import IO, Any

_TOKEN = "@@dlperf-samples-{}@@"
_ROWS_TOKEN = "@@dlperf-rows-{}@@"
_TOKEN_RE = re.compile(r'"@@dlperf-(samples|rows)-(\d+)@@"')
_ROW_DUMPS = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def json_number(v: float | None) -> float | str | None:
    """A number as the result JSON holds it: non-finite values as ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` (the file stays strict JSON); None stays None."""
    if v is None:
        return None
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def sample_row(iteration: int, value: float, rank: int | None) -> list[Any]:
    """One row of a trial's ``samples``: ``[iteration, value]`` or ``[iteration, value, rank]``."""
    return [iteration, json_number(value)] if rank is None else [iteration, json_number(value), rank]


def samples_json(samples) -> str:
    """A trial's ``samples`` as result_json writes them: ``[[iteration, value(, rank)], ...]`` on one
    line. Whole columns at C speed when every value is finite (their sum is) and the ranks are all
    known or all unknown; row by row otherwise (the same text)."""
    its, vals, ranks = samples.iteration, samples.value, samples.rank
    if not its:
        return "[]"
    fvals = list(map(float, vals))
    if math.isfinite(sum(fvals)):
        if ranks.count(None) == len(ranks):
            return _ROW_DUMPS(list(zip(its, fvals)))
        if None not in ranks:
            return _ROW_DUMPS(list(zip(its, fvals, ranks)))
    return _ROW_DUMPS([sample_row(it, v, r) for it, v, r in zip(its, vals, ranks)])


class SampleSpool:
    """Serialised samples of many trials in one temporary file: :meth:`put` returns the
    placeholder the document carries instead of the rows; :func:`write_document` puts them back."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self._fh = tempfile.TemporaryFile(mode="w+b", dir=directory, prefix=".dlperf-samples-")
        self._where: list[tuple[int, int]] = []
        self._end = 0

    def put(self, samples) -> str:
        data = samples_json(samples).encode("ascii")
        self._fh.write(data)
        self._where.append((self._end, len(data)))
        self._end += len(data)
        return _TOKEN.format(len(self._where) - 1)

    def copy_to(self, index: int, out: IO[bytes]) -> None:
        off, n = self._where[index]
        self._fh.flush()
        self._fh.seek(off)
        while n > 0:
            chunk = self._fh.read(min(n, 1 << 20))
            if not chunk:
                raise OSError("sample spool file is shorter than what was written to it")
            out.write(chunk)
            n -= len(chunk)
        self._fh.seek(0, os.SEEK_END)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "SampleSpool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_document(result: Mapping[str, Any], spool: SampleSpool | None, out: IO[bytes]) -> None:
    """Write ``result`` to the binary stream ``out``: the ONE layout of a result JSON (indented,
    each trial's ``samples`` on one line). A trial's ``samples`` is either its rows or a spool
    placeholder (:meth:`SampleSpool.put`), whose bytes come from ``spool``. ``result`` is not changed."""
    rows: list[Any] = []
    doc = dict(result)
    if "cells" in doc:
        doc["cells"] = [_with_row_tokens(cell, rows) for cell in doc["cells"]]
    text = json.dumps(doc, indent=2, allow_nan=False)
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        out.write(text[pos:m.start()].encode("utf-8"))
        if m.group(1) == "rows":
            out.write(_ROW_DUMPS(rows[int(m.group(2))]).encode("utf-8"))
        elif spool is None:
            raise ValueError("result document holds sample placeholders but no spool was given")
        else:
            spool.copy_to(int(m.group(2)), out)
        pos = m.end()
    out.write(text[pos:].encode("utf-8"))
    out.write(b"\n")


def _with_row_tokens(cell: Mapping[str, Any], rows: list[Any]) -> Mapping[str, Any]:
    """``cell`` with each trial's sample rows (not a spool placeholder) swapped for a token; the
    rows are appended to ``rows``."""
    trials = []
    for trial in cell.get("trials", []):
        samples = trial.get("samples", [])
        if not isinstance(samples, str):
            rows.append(samples)
            trial = {**trial, "samples": _ROWS_TOKEN.format(len(rows) - 1)}
        trials.append(trial)
    return {**cell, "trials": trials}


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """``write(fh)`` into a temp file beside ``path``, then rename it over ``path`` (a reader sees the old
    file or the whole new one; the temp file never stays behind). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".result-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_result_file(result: Mapping[str, Any], spool: SampleSpool | None, path: str | os.PathLike) -> Path:
    """:func:`write_document` to ``path`` atomically."""
    return write_atomic(path, lambda fh: write_document(result, spool, fh))


def copy_file(path: str | os.PathLike, out: IO[bytes]) -> None:
    with open(path, "rb") as fh:
        shutil.copyfileobj(fh, out, 1 << 20)
