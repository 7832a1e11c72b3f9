"""Bounds on what is read back from a store: the endpoint is never trusted.

- every object is read in bounded pieces and never past what the reader expects (the
  manifest's size, or a HEAD/stat size under a sane bound) plus one byte: the extra byte is
  how "the endpoint sends more than it should" is detected;
- a download has an overall deadline and a minimum-progress rule: at least ``min_bytes``
  (or what is left of the object) every ``stall_s`` seconds, so a body dripping a byte every
  few seconds fails in bounded time;
- documents read whole (result.json, report.md, a manifest, an annotation, a pointer) are
  refused above ``max_doc_bytes`` before they are read; an index above ``max_index_bytes``.

Every knob is a setting (dlperf_tasks.core.settings; seconds / bytes), read when a reader starts:
``store_deadline_s`` (900), ``store_stall_s`` (30), ``store_min_bytes`` (1024),
``store_max_doc_bytes`` (64 MiB), ``store_max_index_bytes`` (1 GiB); in the environment
``DLPERF_STORE_DEADLINE_S`` and so on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import IO, Callable, Mapping

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.settings import SettingsError, env_name, env_value

MiB = 1 << 20
PIECE = MiB  # one read asks for at most this much

_ENV = {name: env_name(f"store_{name}") for name in
        ("deadline_s", "stall_s", "min_bytes", "max_doc_bytes", "max_index_bytes")}
MAX_DOC_ENV, MAX_INDEX_ENV = _ENV["max_doc_bytes"], _ENV["max_index_bytes"]  # named in refusals


@dataclass(frozen=True)
class Limits:
    deadline_s: float = 900.0
    stall_s: float = 30.0
    min_bytes: int = 1024
    max_doc_bytes: int = 64 * MiB
    max_index_bytes: int = 1024 * MiB

    @classmethod
    def from_settings(cls, settings) -> "Limits":
        """The bounds of a :class:`~dlperf_tasks.core.settings.Settings` (its ``store_*`` keys)."""
        return cls(**{name: getattr(settings, f"store_{name}") for name in _ENV})

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Limits":
        """The bounds the environment sets (else the defaults), checked by the settings module."""
        try:
            return cls(**{name: env_value(f"store_{name}", env) for name in _ENV})
        except SettingsError as exc:
            raise StoreError(str(exc)) from None


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


class Progress:
    """The clock of one download (one or several objects): the overall deadline and the
    minimum-progress rule. ``tick(n, left)`` after each read; raises StoreError on a breach."""

    def __init__(self, limits: Limits | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits or Limits.from_env()
        self.clock = clock
        self.start = clock()
        self.deadline = self.start + self.limits.deadline_s
        self.restart()

    def restart(self) -> None:
        """A new object begins: its progress window starts now."""
        self.mark, self.since_mark = self.clock(), 0

    def tick(self, n: int, left: int, where: str) -> None:
        now = self.clock()
        if now > self.deadline:
            raise StoreError(f"{where}: download deadline passed ({self.limits.deadline_s:g} s; "
                             f"{_ENV['deadline_s']}); nothing partial is kept")
        self.since_mark += n
        if self.since_mark >= min(self.limits.min_bytes, max(left, 1)):
            self.mark, self.since_mark = now, 0
        elif now - self.mark > self.limits.stall_s:
            raise StoreError(f"{where}: download stalled: less than {self.limits.min_bytes} bytes in "
                             f"{self.limits.stall_s:g} s ({_ENV['stall_s']}); nothing partial is kept")


def read_piece(src: IO[bytes], n: int) -> bytes:
    """At most ``n`` bytes, returning as soon as some arrived (``read1`` where the stream has it)."""
    read1 = getattr(src, "read1", None)
    return read1(n) if read1 is not None else src.read(n)


def pieces(src: IO[bytes], expected: int, where: str, progress: Progress | None = None):
    """Yield the bytes of ``src`` in bounded pieces; StoreError as soon as more than
    ``expected`` bytes arrive (at most ``expected + 1`` are ever read), or on a breach of the
    deadline / minimum progress. Short bodies are the caller's to detect (it knows the size)."""
    progress = progress or Progress()
    progress.restart()
    total = 0
    while True:
        want = min(PIECE, expected + 1 - total)
        try:
            block = read_piece(src, want)
        except StoreError:
            raise
        except Exception as exc:  # a cut connection, a socket timeout, a protocol error
            raise StoreError(f"{where}: download failed after {total} bytes: {_why(exc)}") from None
        if not block:
            return
        total += len(block)
        if total > expected:
            raise StoreError(f"{where}: the endpoint sent more than the expected {expected} bytes; refused")
        progress.tick(len(block), expected - total, where)
        yield block


def read_bounded(src: IO[bytes], expected: int, where: str, progress: Progress | None = None) -> bytes:
    """All of ``src`` (at most ``expected`` bytes, see :func:`pieces`)."""
    return b"".join(pieces(src, expected, where, progress))


def check_size(size: int | None, bound: int, where: str, what: str, env: str) -> None:
    """Refuse an object whose size (from HEAD/stat or a manifest) is above ``bound``."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise StoreError(f"{where}: {what} has no valid size ({size!r})")
    if size > bound:
        raise StoreError(f"{where}: {what} is {human(size)}, more than the {human(bound)} this reads "
                         f"({env}); refused before reading it")


def _why(exc: BaseException) -> str:
    name = type(exc).__name__
    text = " ".join(str(exc).split())[:200]
    if "timed out" in text.lower() or "timeout" in name.lower():
        return f"no data within the stall timeout ({name})"
    return f"{name}: {text}" if text else name
