"""A running trial's node logs, streamed to disk and parsed incrementally for the watchdog.

Each node's new log bytes are appended to the trial's local log file (never held in memory)
and parsed once, as they come: :class:`BlockProgress` keeps only the unfinished last line and
the highest iteration seen, and runs the framework's incremental parser
(``Framework.stream()``, :mod:`dlperf_tasks.frameworks._stream`) over each block of complete new
lines with a fresh parser state. Polling cost is proportional to the new bytes whatever the
log's size, and a trial's memory is bounded by :data:`CHUNK` per node. (A parser state kept for
the whole log would keep every sample: its memory grows with the log; the gate parses the
finished log file from disk.)
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Callable, Protocol

from dlperf_tasks.frameworks._lines import MAX_LINE

#: most bytes read from a node in one request (bounds a trial's memory per node)
CHUNK = 4 << 20
#: most requests per node in one poll (a log growing faster than this is caught up on the next polls)
MAX_CHUNKS_PER_POLL = 8


class ProgressState(Protocol):
    max_iteration: int

    def feed(self, text: str) -> None: ...


class BlockProgress:
    """Highest iteration number of a log fed in arbitrary pieces. Each piece's complete lines
    are scanned once by a fresh ``fw.stream()`` state; the unfinished tail (cut at
    :data:`MAX_LINE` characters) waits for the next piece."""

    def __init__(self, fw) -> None:
        self._fw = fw
        self._pending = ""
        self.max_iteration = 0

    def feed(self, text: str) -> None:
        if not text:
            return
        data = self._pending + text if self._pending else text
        cut = max(data.rfind("\n"), data.rfind("\r"))
        if cut < 0:
            self._pending = data[:MAX_LINE]
            return
        self._pending = data[cut + 1:][:MAX_LINE]
        self._scan(data[: cut + 1])

    def finish(self) -> None:
        """The log ended: its last line counts even without a line break."""
        tail, self._pending = self._pending, ""
        if tail:
            self._scan(tail + "\n")

    def _scan(self, block: str) -> None:
        try:
            state = self._fw.stream()
            state.feed(block)
            top = state.max_iteration
        except Exception:  # noqa: BLE001 - parsers must not raise; a progress check never fails a trial
            return
        if top is not None and top > self.max_iteration:
            self.max_iteration = top


def progress_state(fw) -> ProgressState:
    return BlockProgress(fw)


class NodeLog:
    """One node's log of a running trial: ``add`` appends new bytes to ``path`` and, when the
    node carries the iteration lines, feeds them to a progress state."""

    def __init__(self, path: Path, state: ProgressState | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.state = state
        self.offset = 0

    def add(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._fh.write(chunk)
        self.offset += len(chunk)
        if self.state is not None:
            self.state.feed(self._decoder.decode(chunk))

    @property
    def max_iteration(self) -> int:
        return self.state.max_iteration if self.state is not None else 0

    def pull(self, read: Callable[[int, int], bytes], max_chunks: int = MAX_CHUNKS_PER_POLL) -> int:
        """Read what is new (``read(offset, max_bytes)``) in pieces of :data:`CHUNK`, at most
        ``max_chunks`` of them (0 = until the end). Returns the number of new bytes."""
        got, n = 0, 0
        while max_chunks == 0 or n < max_chunks:
            chunk = read(self.offset, CHUNK)
            self.add(chunk)
            got += len(chunk)
            n += 1
            if len(chunk) < CHUNK:
                break
        return got

    def tail(self, n: int = 400) -> bytes:
        if not self._fh.closed:
            self._fh.flush()
        size = self.path.stat().st_size
        with open(self.path, "rb") as fh:
            fh.seek(max(0, size - n))
            return fh.read()

    def close(self) -> None:
        """Close the file; the last unfinished line is parsed too."""
        if self._fh.closed:
            return
        if self.state is not None:
            self.state.feed(self._decoder.decode(b"", final=True))
            finish = getattr(self.state, "finish", None)
            if callable(finish):
                finish()
        self._fh.close()
