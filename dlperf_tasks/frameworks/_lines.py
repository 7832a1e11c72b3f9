"""Helpers shared by the framework log parsers and command builders.

* :func:`split_lines` turns whatever a caller hands a parser (an open text or binary
  file, a list of strings, chunks with ``\\r`` progress bars glued in) into clean
  text lines, streaming, with a cap on line length so a binary blob cannot blow up memory.
* :func:`read_log` streams a file from disk the same way (constant memory).
* :func:`strip_tag` removes OpenMPI's ``--tag-output`` prefix ``[1,N]<stderr>:`` and
  returns the rank N.
* :class:`FactCollector` records the sanity facts (:class:`~dlperf_tasks.core.model.LogFacts`):
  crash markers, parse errors, line count, iterations and ranks seen.
* :func:`parse_float` reads a number and rejects NaN/inf/garbage with a clear message.
"""

from __future__ import annotations

import codecs
import copy
import math
import re
from itertools import compress, count, repeat
from operator import add, attrgetter, ge
from collections.abc import Iterable, Iterator

from dlperf_tasks.core.model import LogFacts, Sample, as_samples
from dlperf_tasks.core.samples import SAMPLE_FIELDS

#: longest line kept (longer ones are cut; real training lines are < 4 KiB,
#: the MXNet ``Namespace(...)`` line is ~20 KiB)
MAX_LINE = 256 * 1024
#: at most this many crash markers / errors are recorded (the first ones matter)
MAX_RECORDED = 50
_CHUNK = 64 * 1024

_NEWLINES = re.compile(r"\r\n|\r|\n")
_TAG = re.compile(r"^\[(\d+),(\d+)\]<(?:stdout|stderr|stddiag)>:")

# (marker name reported in LogFacts.crash_markers, regex searched in each line)
CRASH_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("Traceback", re.compile(r"Traceback \(most recent call last\)")),
    ("CUDA out of memory", re.compile(r"CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation")),
    ("out of memory", re.compile(r"\bResourceExhaustedError\b|\bOOM when allocating\b|std::bad_alloc")),
    ("NCCL error", re.compile(r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|NCCL WARN .*(?i:failed|error)")),
    ("Killed", re.compile(r"(?:^|\s)Killed(?:\s|$)")),
    ("exited on signal", re.compile(r"exited on signal \d+")),
    ("non-zero exit", re.compile(r"returned a non-zero exit code|returned non-zero exit status")),
    ("Segmentation fault", re.compile(r"Segmentation fault|SIGSEGV|core dumped")),
    ("MPI abort", re.compile(r"MPI_ABORT was invoked|ORTE has lost communication|ORTE was unable to reliably start")),
    ("CUDA error", re.compile(r"CUDA error: |CUDNN_STATUS_[A-Z_]*ERROR|cudaErrorLaunchFailure|an illegal memory access")),
    ("MXNet error", re.compile(r"mxnet\.base\.MXNetError")),
    # the script refused its command line (argparse exits 2, absl 1) or failed a setup check before
    # training: the line says why (a misspelled flag, a BERT-large config, a Megatron assert)
    ("usage error", re.compile(r"\S: error: (?:unrecognized arguments|the following arguments are required|argument )"
                         r"|FATAL Flags parsing error")),
    ("setup error", re.compile(r"^(?:ValueError|AssertionError|FileNotFoundError): \S")),
]

# Every crash pattern above contains one of these literal substrings. A line with none of them
# cannot match, and ``in`` is ~30x faster than the combined regex (which tries every
# alternative at every position: ~70 us on a 200-character line, i.e. minutes for a 1 GB log).
# Keep in sync when adding a pattern (tests/unit/test_frameworks_parsers.py checks the markers).
_CRASH_HINTS = ("Traceback", "CUD", "rror", "OOM when", "bad_alloc", "NCCL WARN", "Killed", "exit",
                "Segmentation fault", "SIGSEGV", "core dumped", "MPI_ABORT", "ORTE ", "illegal memory")
#: the whole-text scan of :mod:`_stream` costs one ``str.find`` pass per hint, so the list is the
#: smallest set of literals that covers every alternative of every pattern (``rror`` covers
#: ResourceExhaustedError, NCCL error, nccl*Error, cudaError*, MXNetError, ``: error:``, the Flags
#: parsing error and the setup errors; ``CUD`` covers CUDA* and CUDNN*; ``exit`` both exit patterns)


#: hint -> the patterns that can match a line holding it (the hint is part of the pattern's text)
_HINT_PATTERNS = {h: [i for i, (_, rx) in enumerate(CRASH_PATTERNS) if h.strip() in rx.pattern] for h in _CRASH_HINTS}
assert all(_HINT_PATTERNS.values()), "every crash hint must appear in a crash pattern"


def _decode(chunk: str | bytes | bytearray) -> str:
    if isinstance(chunk, (bytes, bytearray)):
        return bytes(chunk).decode("utf-8", errors="replace")
    if not isinstance(chunk, str):
        return str(chunk)
    return chunk


def split_lines(lines: Iterable[str | bytes]) -> Iterator[str]:
    """Yield clean text lines from ``lines`` (an open file, a list of strings, bytes...).

    Each item is one line (a trailing newline is optional); an item holding ``\\r`` or
    several lines (tqdm progress bars glued before a log line) is split further, like
    Python's universal-newline mode, which is how DLPerf's extractors saw such logs.
    NUL bytes are dropped and lines are cut at :data:`MAX_LINE` characters.
    """
    for item in lines:
        text = _decode(item)
        if "\x00" in text:
            text = text.replace("\x00", "")
        parts = _NEWLINES.split(text)
        if len(parts) > 1 and parts[-1] == "":
            parts.pop()
        for p in parts:
            yield p[:MAX_LINE]


def split_chunks(chunks: Iterable[str | bytes]) -> Iterator[str]:
    """Yield text lines from arbitrary pieces of a stream (a line may span pieces).

    Same splitting as :func:`split_lines`; a line longer than :data:`MAX_LINE` is cut
    (its head is kept, the rest up to the next line break dropped), so memory stays
    bounded whatever the input (a binary file without newlines included).
    """
    pending = ""  # text of an unfinished line
    after_cr = False  # the previous chunk ended with "\\r" (maybe half of "\\r\\n")
    skipping = False  # inside an over-long line whose head was already emitted
    for chunk in chunks:
        text = _decode(chunk)
        if "\x00" in text:
            text = text.replace("\x00", "")
        if not text:
            continue
        if after_cr and text.startswith("\n"):
            text = text[1:]
        after_cr = text.endswith("\r")
        parts = _NEWLINES.split(pending + text)
        pending = parts.pop()  # "" when the chunk ended with a line break
        for p in parts:
            if skipping:
                skipping = False
                continue
            yield p[:MAX_LINE]
        if skipping:
            pending = ""
        elif len(pending) > MAX_LINE:
            yield pending[:MAX_LINE]
            pending = ""
            skipping = True
    if pending and not skipping:
        yield pending[:MAX_LINE]


def read_log(path: str) -> Iterator[str]:
    """Stream the lines of the log file at ``path`` (binary-safe, constant memory)."""

    def chunks() -> Iterator[bytes]:
        with open(path, "rb") as fh:
            while True:
                block = fh.read(_CHUNK)
                if not block:
                    return
                yield block

    return split_chunks(_utf8_safe(chunks()))


def _utf8_safe(blocks: Iterable[bytes]) -> Iterator[str]:
    """Decode byte blocks without splitting a multi-byte UTF-8 character across blocks."""
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for b in blocks:
        yield dec.decode(b)
    tail = dec.decode(b"", final=True)
    if tail:
        yield tail


def strip_tag(line: str) -> tuple[int | None, str]:
    """``"[1,5]<stderr>:INFO:root:..."`` -> ``(5, "INFO:root:...")``; untagged -> ``(None, line)``."""
    m = _TAG.match(line)
    if not m:
        return None, line
    return int(m.group(2)), line[m.end():]


def parse_float(text: str) -> float | None:
    """A finite float or None (NaN, inf and garbage are rejected)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    if math.isnan(v) or math.isinf(v):
        return None
    return v


def crash_marker(text: str) -> str | None:
    """The name of the first crash pattern (in :data:`CRASH_PATTERNS` order) found in ``text``."""
    # one pattern at a time: each starts with literals ``re`` can skip to, where the combined
    # alternation tries every alternative at every position (~70 us a line)
    which = sorted({i for h, idx in _HINT_PATTERNS.items() if h in text for i in idx})
    return next((CRASH_PATTERNS[i][0] for i in which if CRASH_PATTERNS[i][1].search(text)), None)



class FactCollector:
    """Accumulates :class:`LogFacts` while a parser streams a log."""

    def __init__(self) -> None:
        self.facts = LogFacts()
        self._iters: set[int] = set()
        self._ranks: set[int] = set()
        self._crash_seen: set[str] = set()

    def line(self, text: str) -> None:
        """Count a line and look for crash markers in it."""
        self.facts.lines += 1
        if any(h in text for h in _CRASH_HINTS):
            self.crash_line(text)

    def crash_line(self, text: str) -> None:
        """Record the crash marker in ``text``, if any (the line is not counted)."""
        if len(self.facts.crash_markers) >= MAX_RECORDED:
            return
        name = crash_marker(text)
        if name is None:
            return
        snippet = text.strip()[:200]
        key = name + "|" + snippet
        if key not in self._crash_seen:
            self._crash_seen.add(key)
            self.facts.crash_markers.append(f"{name}: {snippet}" if snippet and snippet != name else name)

    def error(self, message: str) -> None:
        """Record a parse problem (value not a finite number, garbage in an iteration line...)."""
        if len(self.facts.errors) < MAX_RECORDED:
            self.facts.errors.append(message)
        elif len(self.facts.errors) == MAX_RECORDED:
            self.facts.errors.append("... more parse errors not shown")

    def iteration(self, it: int, rank: int | None = None) -> None:
        self._iters.add(it)
        if rank is not None:
            self._ranks.add(rank)

    def rank(self, rank: int) -> None:
        self._ranks.add(rank)

    def finish(self) -> LogFacts:
        self.facts.iterations_seen = sorted(self._iters)
        self.facts.ranks_seen = sorted(self._ranks)
        return self.facts

    def snapshot(self) -> LogFacts:
        """A copy of the facts so far (the collector keeps going)."""
        snap = copy.copy(self.facts)
        snap.iterations_seen = sorted(self._iters)
        snap.ranks_seen = sorted(self._ranks)
        snap.crash_markers = list(self.facts.crash_markers)
        snap.errors = list(self.facts.errors)
        return snap


def missing_iterations(seen: Iterable[int], first: int, last: int, limit: int = 5) -> list[int]:
    """Iterations in ``first..last`` (inclusive) that are absent from ``seen`` (at most ``limit``)."""
    s = set(seen)
    out = []
    for i in range(first, last + 1):
        if i not in s:
            out.append(i)
            if len(out) >= limit:
                break
    return out


def fmt_list(items: list, limit: int = 5) -> str:
    head = ", ".join(str(i) for i in items[:limit])
    return head + (", ..." if len(items) > limit else "")


def round2(x: float) -> float:
    """DLPerf rounds each per-file result with Python's ``round(x, 2)``."""
    return round(float(x), 2)


def clock_seconds(day: float, hours: list[str], minutes: list[str], seconds: list[str]) -> list[float]:
    """Timestamps of a column of ``HH:MM:SS.ffffff`` clocks on one day (``day``: its 00:00 in
    seconds), at C speed. ``day`` + hours + minutes is a whole number, so adding ``SS.ffffff`` last
    rounds once, like adding the whole seconds first and the fraction after: the same double (with 6
    decimals the exact sum is never within rounding reach of a tie). Raises ValueError on a bad field."""
    hm = list(zip(hours, minutes))  # a log's lines share few (hour, minute) pairs: each converted once
    base = {k: day + (int(k[0]) * 3600 + int(k[1]) * 60) for k in set(hm)}
    return list(map(add, map(base.__getitem__, hm), map(float, seconds)))


#: :func:`step_window`'s answer: the two samples that bound the window, or ``(None, needed_step)``
StepSpan = tuple[Sample | None, Sample | int]


def step_window(samples: list, stride: int | None, warmup: int, total: int, skip: int = 0) -> StepSpan:
    """The two logged samples that bound a window counted in **steps**, not lines.

    ``samples`` in file order (one per logged step). The log's origin is the step before its
    first logged one (``first - stride``: 0 for a log that starts at step 1 and logs every step,
    2822 for a resumed DLE log with ``log_freq`` 50 that starts at 2872). The window starts at the
    first logged step >= ``origin + skip + warmup`` and ends at the first >= ``origin + skip + total``.
    With stride 1 from step 1 this is DLPerf's "20th and 120th counted line" rule. Returns
    ``(start, end)`` or ``(None, needed_step)`` when the log stops too early.
    """
    if not samples:
        return None, total + skip
    samples = as_samples(samples)
    its = samples.iteration
    stride = max(int(stride or 1), 1)
    origin = its[0] - stride
    want_start, want_end = origin + skip + warmup, origin + skip + total
    # the first logged step >= each bound (want_end >= want_start: the end is never before the
    # start), found in the iteration column at C speed; Sample objects only for the two ends
    start = _first_at_least(its, want_start)
    end = None if start is None else _first_at_least(its, want_end)
    if end is None:
        return None, want_end
    columns = _COLUMNS(samples)
    return Sample(*[c[start] for c in columns]), Sample(*[c[end] for c in columns])


#: the columns of a Samples, in Sample's field order
_COLUMNS = attrgetter(*SAMPLE_FIELDS)


def _first_at_least(values: list, bound) -> int | None:
    """The index of the first value ``>= bound`` (None: none is)."""
    return next(compress(count(), map(ge, values, repeat(bound))), None)


def window_problems(samples: list, span: StepSpan, window, *, label: str = "step", after: str = "") -> list[str]:
    """``check()`` of a timestamp-rule parser (PyTorch DLE, TF BERT): why :func:`step_window`
    found no window (``span``, its answer; the log stops too early: "only N of M iterations",
    counted in steps) or why its two timestamps give no speed. ``label`` names a logged step
    ("step", "'Train Step'"), ``after`` qualifies the count (" after the first 5 steps")."""
    start, end = span
    if start is None:
        last = max(as_samples(samples).iteration)
        have = max(0, window.total - (end - last))
        return [f"only {have} of {window.total} iterations{after} (last {label} seen {last}, the window needs "
                f"step {end}; counted in steps)"]
    if end.value - start.value <= 0:
        return [f"timestamps do not increase between {label} {start.iteration} and {label} {end.iteration}"]
    return []
