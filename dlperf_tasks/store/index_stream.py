"""Read a suite index (``{"runs": [...], "schema_version": 1, "suite": "..."}``) run by run, in
bounded pages, so an index of 200,000 runs never has to be held whole (issue 27.1).

:func:`iter_index_runs` takes the index's bytes as an iterator of pages (at most
:data:`dlperf_tasks.store.limits.PIECE` each, see :func:`dlperf_tasks.store.limits.pieces`)
and yields each run summary (a dict) as soon as it is complete. Memory is one page plus one
run entry; an entry above ``max_entry`` characters is refused (a hostile index cannot make
one row of any size). The other top-level keys are checked for well-formedness and skipped.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Iterable, Iterator

from dlperf_tasks.errors import StoreError

MAX_ENTRY = 8 << 20  # characters of one run summary
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Text:
    """A window over the decoded pages: ``text[pos:]`` is what is not consumed yet."""

    def __init__(self, pages: Iterable[bytes], where: str):
        self.pages = iter(pages)
        self.where = where
        self.dec = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.eof = "", 0, False

    def fill(self) -> bool:
        if self.eof:
            return False
        page = next(self.pages, None)
        try:
            more = self.dec.decode(page if page is not None else b"", final=page is None)
        except UnicodeDecodeError as exc:
            raise StoreError(f"{self.where}: index is not valid UTF-8 ({exc.reason})") from None
        self.eof = page is None
        self.text = self.text[self.pos:] + more
        self.pos = 0
        return True

    def peek(self) -> str:
        while True:
            self.pos = _WS.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str) -> str:
        ch = self.peek()
        if not ch or ch not in chars:
            raise StoreError(f"{self.where}: index is not valid JSON (expected {' or '.join(chars)!s}, "
                             f"found {ch or 'the end'!r})")
        self.pos += 1
        return ch

    def value(self, max_len: int):
        self.peek()
        while True:
            try:
                v, end = _DECODER.raw_decode(self.text, self.pos)
                # a number (or literal) cut at the end of a page may continue on the next one
                if end < len(self.text) or self.eof or self.text[self.pos] in '{["':
                    self.pos = end
                    return v
            except ValueError as exc:
                if self.eof:
                    raise StoreError(f"{self.where}: index is not valid JSON ({exc})") from None
            if len(self.text) - self.pos > max_len:
                raise StoreError(f"{self.where}: an index entry is longer than {max_len} characters; refused")
            self.fill()


def iter_index_runs(pages: Iterable[bytes], where: str, max_entry: int = MAX_ENTRY) -> Iterator[dict]:
    """Each run summary of the index, in file order (see the module docstring)."""
    t = _Text(pages, where)
    t.expect("{")
    seen_runs = False
    if t.peek() == "}":
        t.pos += 1
    else:
        while True:
            key = t.value(4096)
            if not isinstance(key, str):
                raise StoreError(f"{where}: index is not valid JSON (a key is not a string)")
            t.expect(":")
            if key == "runs":
                seen_runs = True
                yield from _runs(t, where, max_entry)
            else:
                t.value(max_entry)
            if t.expect(",}") == "}":
                break
    if t.peek():
        raise StoreError(f"{where}: index is not valid JSON (data after the document)")
    if not seen_runs:
        raise StoreError(f"{where}: index has no 'runs' list")


def _runs(t: _Text, where: str, max_entry: int) -> Iterator[dict]:
    t.expect("[")
    if t.peek() == "]":
        t.pos += 1
        return
    n = 0
    while True:
        run = t.value(max_entry)
        if not isinstance(run, dict):
            raise StoreError(f"{where}: index entry {n} is not an object")
        n += 1
        yield run
        if t.expect(",]") == "]":
            return
