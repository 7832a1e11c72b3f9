"""Read a suite index (``{"runs": [...], "schema_version": 1, "suite": "..."}``) run by run, in
bounded pages, so an index of 200,000 runs never has to be held whole.

:func:`iter_index_runs` takes the index's bytes as an iterator of pages (at most
:data:`dlperf_tasks.store.limits.PIECE` each, see :func:`dlperf_tasks.store.limits.pieces`)
and yields each run summary (a dict) as soon as it is complete. The parsing is ijson's
(streaming; its C backend, yajl2_c, where installed). This module adds what ijson does not:

- the shape, in two passes over the same bytes: ijson's events up to the start of the
  ``runs`` list check that the document is an object with a ``runs`` list (keys before it
  are checked for well-formedness and skipped); then ijson's ``items`` (C end to end, as fast
  as ``json``) re-reads those first pages from a tape and yields the entries, each checked to
  be an object. Keys after the list are checked for well-formedness only (ijson);
- the UTF-8 check (pages are decoded incrementally as ijson is handed them);
- the size bound: more than ``max_entry`` characters before the list, between two entries, or
  after the last one is refused, so a hostile index cannot make one row of any size; memory
  is one chunk of ijson's work, one entry and (before the list starts) the tape;
- every failure is one :class:`StoreError` line naming the index, never quoting it.
"""

from __future__ import annotations

import codecs
from collections import deque
from typing import Iterable, Iterator

import ijson

from dlperf_tasks.core.errors import StoreError

MAX_ENTRY = 8 << 20  # characters of one run summary
CHUNK = 64 << 10  # bytes ijson is handed at a time
_RUNS = "runs.item"  # ijson's prefix of the run entries
_FOUND = {"start_array": "[", "start_map": "{", "end_array": "]", "end_map": "}"}


class _Pages:
    """The pages as a file for ijson (``read(n)``), decoded as they pass: ``chars`` counts
    the characters handed over; while ``mark`` is set, more than ``max_entry`` characters
    handed over since ``mark`` (the last boundary seen) is refused."""

    def __init__(self, pages: Iterable[bytes], where: str, max_entry: int):
        self.pages, self.where, self.max_entry = iter(pages), where, max_entry
        self.dec = codecs.getincrementaldecoder("utf-8")()
        self.rest = b""
        self.chars = 0
        self.mark: int | None = 0

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        if self.mark is not None and self.chars - self.mark > self.max_entry:
            raise StoreError(f"{self.where}: an index entry is longer than {self.max_entry} characters; refused")
        while not self.rest:
            page = next(self.pages, None)
            if page is None:
                self._decode(b"", True)
                return b""
            self.rest = page
        n = len(self.rest) if n is None or n < 0 else n
        out, self.rest = self.rest[:n], self.rest[n:]
        self._decode(out, False)
        return out

    def _decode(self, data: bytes, final: bool) -> None:
        try:
            self.chars += len(self.dec.decode(data, final))
        except UnicodeDecodeError as exc:
            raise StoreError(f"{self.where}: index is not valid UTF-8 ({exc.reason})") from None


class _Tape:
    """Records what the first pass reads; the second pass gets it again, then reads on."""

    def __init__(self, src: _Pages):
        self.src, self.saved, self.recording = src, deque(), True

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        if not self.recording and self.saved:
            return self.saved.popleft()
        data = self.src.read(n)
        if self.recording:
            self.saved.append(data)
        return data


def _reason(exc: Exception) -> str:
    """ijson's message, first line only (the rest quotes the document)."""
    text = exc.args[0] if exc.args else exc
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return (str(text).strip().splitlines() or ["?"])[0]


def _find_runs(events: Iterator[tuple], src: _Pages, where: str) -> None:
    """Reads ijson's events up to the start of the ``runs`` list; raises when there is none."""
    _, event, value = next(events)
    if event != "start_map":
        raise StoreError(f"{where}: index is not valid JSON (expected {{, found {_FOUND.get(event, repr(value))!r})")
    depth = 1
    for _, event, value in events:
        if depth == 1 and event == "end_map":
            break
        if depth == 1 and event == "map_key":
            src.mark = src.chars
            if value == _RUNS:  # its value would read as entries in the second pass
                raise StoreError(f"{where}: index has a top-level key {_RUNS!r}; refused")
            if value == "runs":
                _, event, value = next(events)
                if event != "start_array":
                    raise StoreError(f"{where}: index 'runs' is not a list")
                src.mark = src.chars
                return
        elif event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
    src.mark = None  # the document is complete; what follows is ijson's to refuse
    next(events, None)
    raise StoreError(f"{where}: index has no 'runs' list")


def iter_index_runs(pages: Iterable[bytes], where: str, max_entry: int = MAX_ENTRY) -> Iterator[dict]:
    """Each run summary of the index, in file order (see the module docstring)."""
    src = _Pages(pages, where, max_entry)
    tape = _Tape(src)
    try:
        _find_runs(ijson.parse(tape, buf_size=CHUNK), src, where)
        tape.recording = False
        n = 0
        for run in ijson.items(tape, _RUNS, buf_size=CHUNK, use_float=True):
            if type(run) is not dict:
                raise StoreError(f"{where}: index entry {n} is not an object")
            src.mark = src.chars
            n += 1
            yield run
    except UnicodeDecodeError as exc:  # a string escape that is no Unicode text (a lone surrogate)
        raise StoreError(f"{where}: index is not valid JSON (a string that is not Unicode text: {exc.reason})") from None
    except ijson.JSONError as exc:
        reason = _reason(exc)
        after = "data after the document: " if "trailing garbage" in reason else ""
        raise StoreError(f"{where}: index is not valid JSON ({after}{reason})") from None
