"""Incremental log parsing: a parser state that is fed raw text and scans it block by block.

``Framework.stream()`` returns a :class:`LogStream`; ``feed(chunk)`` takes any piece of a log
(``str`` or ``bytes``, a line may span pieces), ``max_iteration`` is the largest iteration seen
so far, ``facts()`` a snapshot of the :class:`~dlperf_tasks.core.model.LogFacts`, ``result()`` the
final :class:`~dlperf_tasks.core.model.ParsedLog`. The watchdog feeds only the new bytes of each
poll; ``dlperf extract`` feeds 1 MiB blocks of a file.

Why blocks: a per-line Python loop costs 10-20 us a line. Here the complete lines of each
piece are normalised once (``\\r\\n`` and ``\\r`` become ``\\n`` like Python's universal newlines,
NUL bytes dropped, tqdm's block glyphs read as ``#``), counted with ``str.count`` and searched
with compiled regexes that start with a literal (``re`` then skips to candidates at C speed).
Only the matching lines cost Python time; crash markers are found with ``in`` per literal hint,
then checked line by line.

Caps (``max_lines``, :data:`MAX_LINE`): a line longer than ``MAX_LINE`` characters and a stream
longer than ``max_lines`` lines are recorded in ``facts.errors`` with a clear reason (the gate
makes the trial invalid); past ``max_lines`` nothing more is scanned.
"""

from __future__ import annotations

import codecs
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable
from operator import contains, sub

from dlperf_tasks.frameworks import _native
from dlperf_tasks.frameworks._lines import _CRASH_HINTS, MAX_LINE, MAX_RECORDED, FactCollector, strip_tag
from dlperf_tasks.core.model import LogFacts, ParsedLog, Sample, Samples

#: the longest step line a parser with a :attr:`LogStream.step_marker` reads (gluon-nlp's are ~150
#: characters; its Namespace lines, which may be longer, hold no step marker)
MAX_STEP_LINE = 2048

#: the UTF-8 of U+2580-U+259F (block elements): tqdm draws its bars with them. Read as ``#``: a text
#: without them is usually all ASCII, which CPython stores one byte a character (faster searches).
#: A glyph split between two pieces is left as it is (correct, only slower).
_BAR_GLYPHS = re.compile(rb"\xe2\x96[\x80-\x9f]")

#: a text left for the crash-marker scan at least this long is scanned once per distinct line
#: (splitting and hashing cost ~1/3 of the 14 ``find`` passes; below this the saving is small)
_DEDUPE_FROM = 32 * 1024

#: an ASCII text left for the crash-marker scan at least this long is first checked in one pass over
#: its distinct line *shapes* (digits read as ``0``): tqdm bars and step counters differ only in their
#: digits, so a PyTorch BERT log's 20 KB of bars come down to ~70 distinct lines. No hint holds a digit
#: or a newline, so a hint occurs in the text exactly when it occurs in its shapes: with none there,
#: the per-hint scan below cannot find anything and is skipped (~0.1 -> 0.06 ms a PyTorch log)
_SHAPES_FROM = 8 * 1024
_DIGITS_TO_0 = bytes.maketrans(b"123456789", b"000000000")
_DIGITS_TO_0_STR = str.maketrans("123456789", "000000000")
_HINTS_ASCII = tuple(h.encode("ascii") for h in _CRASH_HINTS)
assert not any(c.isdigit() or c == "\n" for h in _CRASH_HINTS for c in h), "the shape check needs digit-free hints"


def line_shapes(text: str) -> str:
    """The distinct lines of an ASCII ``text`` with every digit read as ``0``, joined by newlines: a
    literal without digits or newlines occurs in ``text`` exactly when it occurs in this (tqdm bars
    and step counters differ only in their digits: a log's many lines come down to a few shapes)."""
    return "\n".join(set(text.translate(_DIGITS_TO_0_STR).split("\n")))


def literals_in(text: str, literals: tuple[str, ...]) -> int:
    """Bit i set when ``literals[i]`` (no digit, no newline) occurs in the ASCII ``text``."""
    shapes = line_shapes(text) if len(text) >= _SHAPES_FROM else text
    return sum(1 << i for i, literal in enumerate(literals) if literal in shapes)


def _may_hold_hint(text: str) -> bool:
    """False only when no crash hint occurs anywhere in ``text`` (an ASCII str)."""
    shapes = b"\n".join(set(text.encode("ascii").translate(_DIGITS_TO_0).split(b"\n")))
    return any(map(shapes.__contains__, _HINTS_ASCII))


def _lines_holding_twice(block: str, field: str) -> list[tuple[int, int]]:
    """(start, end) of each line of ``block`` that holds ``field`` more than once. One ``split`` and one
    newline test per occurrence at C speed (the usual answer: none); the lines only when there are some."""
    pieces = block.split(field)
    if len(pieces) < 3 or all(map(contains, itertools.islice(pieces, 1, len(pieces) - 1), itertools.repeat("\n"))):
        return []
    out: list[tuple[int, int]] = []
    pos = block.find(field)
    while pos >= 0:
        start = block.rfind("\n", 0, pos) + 1
        end = block.find("\n", pos)
        end = len(block) if end < 0 else end
        if block.find(field, pos + len(field), end) >= 0:
            out.append((start, end))
        pos = block.find(field, end)
    return out


def long_lines(block: str, limit: int) -> list[tuple[int, int]]:
    """(start, end) of each line of ``block`` longer than ``limit`` characters (``end``: its newline or
    the block's end). Such a line covers a whole aligned window of ``(limit + 1) // 2`` characters, so
    one bounded ``find`` per window finds every one: linear in the block, whatever its lines."""
    step = max((limit + 1) // 2, 1)
    out: list[tuple[int, int]] = []
    lo, size = 0, len(block)
    while lo + step <= size:
        if block.find("\n", lo, lo + step) >= 0:
            lo += step
            continue
        start = block.rfind("\n", 0, lo) + 1
        end = block.find("\n", lo)
        end = size if end < 0 else end
        if end - start > limit and (not out or out[-1][0] != start):
            out.append((start, end))
        lo = max(lo + step, end)
    return out


#: the DLE/gluon-nlp ``Namespace(k=v, ...)`` and ``k=v`` flags (values without commas/spaces): a key
#: at the start of the text or after a space, comma or ``(``. Compiled as two patterns, one for the
#: start and one that begins with that character class, so ``re`` skips to candidates at C speed
#: (``(?:^|[\s,(])`` in front gives it no prefix to skip to: every position would be tried). A name
#: never starts with "-", so a ``--`` in front is taken for good (``?+``): no second try without it.
_KV_NAME = r"[A-Za-z_][\w-]*"
_KV_TAIL = r"(?:--)?+({names})\s*=\s*('[^']*'|\"[^\"]*\"|[^\s,)]+)"


def _kv_patterns(names: str) -> tuple[re.Pattern, re.Pattern]:
    tail = _KV_TAIL.format(names=names)
    return re.compile("^" + tail), re.compile(r"[\s,(]" + tail)


_KV = _kv_patterns(_KV_NAME)


def kv_pattern(*keys: str) -> tuple[re.Pattern, re.Pattern]:
    """:func:`kv_args`' patterns for only these keys (a parser makes its own once, at import)."""
    return _kv_patterns("|".join(re.escape(k).replace("_", "[_-]") for k in keys))


def kv_args(text: str, keys: tuple[re.Pattern, re.Pattern] = _KV) -> dict[str, str]:
    """``Namespace(a=1, b='x')`` / ``--a=1 --b x`` -> {"a": "1", "b": "x"} (``=`` forms only).
    ``keys``: a :func:`kv_pattern` for only some keys (a Namespace line has dozens of others)."""
    at_start, after = keys
    out = {}
    pos = 0
    m = at_start.match(text)
    if m:  # what ``(?:^|[\s,(])`` matched first at offset 0
        out[m.group(1).replace("-", "_")] = m.group(2).strip("'\"")
        pos = m.end()
    for m in after.finditer(text, pos):
        out[m.group(1).replace("-", "_")] = m.group(2).strip("'\"")
    return out


def as_int(value) -> int | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return int(f) if math.isfinite(f) and f == int(f) else None


def as_float(text) -> float | None:
    """A float, NaN and inf included (a non-finite loss must be seen, not dropped)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class LogStream:
    """Parser state of one log. Subclasses implement :meth:`scan` (complete lines only)."""

    #: False: samples are dropped after each block (a watchdog that needs only ``max_iteration``
    #: keeps constant memory however long the log); facts are still collected
    keep_samples = True
    #: set by :meth:`scan` when it already knows which crash hints occur in the text it returns: bit i
    #: for ``_CRASH_HINTS[i]`` (the crash-marker scan of that text then skips its own search)
    rest_hints: int | None = None

    def __init__(self, max_lines: int | None = None) -> None:
        self.fc = FactCollector()
        self.samples = Samples()  # columns: parsers add whole columns (Samples.add_columns)
        self.extra: dict = {}
        self.max_lines = max_lines
        self.max_iteration: int | None = None
        self._pending = ""
        self._after_cr = False
        self._skipping = False  # inside an over-long line whose head was already scanned
        self._capped = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lineno = 0  # lines completed before the current block
        self._counted: tuple[str | None, int, int] = (None, 0, 0)  # line_no's last (block, position, newlines)

    # ------------------------------------------------------------ feeding
    def feed(self, chunk: str | bytes | bytearray) -> None:
        """Add the next piece of the log (may end in the middle of a line)."""
        compiled = self._compiled_text(chunk) if isinstance(chunk, (bytes, bytearray)) else None
        newlines = None  # how many "\n" ``text`` holds, when the compiled pass counted them
        if compiled is not None:
            text, newlines = compiled
            self._after_cr = chunk[-1] == 13  # a "\r" last: a "\n" first in the next piece is its pair
            if not text:
                return
        else:
            if isinstance(chunk, (bytes, bytearray)):
                if not chunk.isascii():
                    chunk = _BAR_GLYPHS.sub(b"#", chunk)
                text = self._decoder.decode(bytes(chunk))
            else:
                text = chunk
            if not text:
                return
            if self._after_cr and text[0] == "\n":
                text = text[1:]
                if not text:
                    self._after_cr = False
                    return
            self._after_cr = text[-1] == "\r"
        text = self._pending + text if self._pending else text
        cut = max(text.rfind("\n"), text.rfind("\r"))
        if cut < 0:
            if self._skipping:
                return
            self._pending = text
            if len(text) > MAX_LINE:
                self._long_line()
                self._block(text[:MAX_LINE] + "\n")
                self._pending = ""
                self._skipping = True
            return
        self._pending = text[cut + 1:]
        block = text[:cut + 1]
        if "\r" in block:
            block = block.replace("\r\n", "\n").replace("\r", "\n")
        if self._skipping:
            block = block[block.index("\n") + 1:]
            self._skipping = False
            newlines = None if newlines is None else newlines - 1
        if len(self._pending) > MAX_LINE:
            self._long_line()
            block += self._pending[:MAX_LINE] + "\n"
            self._pending = ""
            self._skipping = True
            newlines = None if newlines is None else newlines + 1
        if block:
            self._block(block, newlines)

    def _compiled_text(self, chunk: bytes | bytearray) -> tuple[str, int] | None:
        """What :meth:`feed` makes of a non-empty piece that is not plain ASCII text (tqdm's glyphs read
        as ``#``, its newlines as ``\\n``), in one compiled pass (:mod:`._native`), with its newline count; None: decode it here
        (no compiled scanner, plain ASCII without ``\\r``, another non-ASCII character, or the decoder
        holding the start of a character)."""
        if _native.log_text is None or not chunk or (chunk.isascii() and b"\r" not in chunk) \
                or self._decoder.getstate()[0]:
            return None
        return _native.log_text(chunk, self._after_cr)

    def close(self) -> ParsedLog:
        """End of the log: scan an unterminated last line, return :meth:`result`."""
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self.feed(tail)
        if self._pending and not self._skipping:
            pending, self._pending = self._pending, ""
            self._block(pending + "\n")
        self._pending = ""
        return self.result()

    def _long_line(self) -> None:
        self.fc.error(f"line {self._lineno + 1}: longer than {MAX_LINE} characters (cap; the rest of it "
                      "was not read)")

    def _block(self, block: str, newlines: int | None = None) -> None:
        """Scan the complete lines of ``block`` (``newlines``: its count of them, None: count here)."""
        if self._capped:
            return
        if "\x00" in block:
            block = block.replace("\x00", "")
        n = block.count("\n") if newlines is None else newlines
        if self.max_lines is not None and self._lineno + n > self.max_lines:
            keep = self.max_lines - self._lineno
            end = -1
            for _ in range(max(keep, 0)):
                end = block.index("\n", end + 1)
            block = block[:end + 1]
            n = keep
            self._capped = True
            self.fc.error(f"log has more than {self.max_lines} lines (cap on lines per trial); "
                          "the rest was not read")
        if len(block) > MAX_LINE:
            for at, _ in long_lines(block, MAX_LINE)[:1]:
                self.fc.error(f"line {self.line_no(block, at)}: longer than {MAX_LINE} characters (cap)")
        self.fc.facts.lines += n
        try:
            rest = self.scan(block)
        except (ValueError, OverflowError) as exc:  # e.g. a 5,000-digit step number (int()'s digit limit)
            self.fc.error(f"lines {self._lineno + 1}-{self._lineno + n}: unreadable value ({str(exc)[:160]})")
            rest = None
        self._crash_scan(block if rest is None else rest)
        self._lineno += n
        if not self.keep_samples:
            self.samples.clear()

    def drop_odd_step_lines(self, block: str, marker: str, field: str) -> tuple[str, str]:
        """``block`` with each odd step line emptied (its newline kept: line numbers stay) and recorded
        as an error, and those lines (for the crash-marker scan). Odd: ``marker`` (what a step regex
        starts at) on a line longer than :data:`MAX_STEP_LINE`, or followed on its line by another
        ``marker`` or by two ``field`` (what the regex backtracks to): trying each of them is
        quadratic in the line. The usual block has none, found in one ``split`` per literal."""
        odd: dict[int, tuple[int, str]] = {}  # line start -> (end, why)
        for start, end in long_lines(block, MAX_STEP_LINE):
            if marker in block[start:end]:
                odd[start] = (end, f"a '{marker.strip()}' line of {end - start} characters (cap {MAX_STEP_LINE})")
        for start, end in _lines_holding_twice(block, marker):
            odd.setdefault(start, (end, f"'{marker.strip()}' more than once on one line"))
        for start, end in _lines_holding_twice(block, field):
            first = block.find(marker, start, end)
            if first >= 0 and block.count(field, first, end) > 1:
                odd.setdefault(start, (end, f"'{field}' more than once after '{marker.strip()}'"))
        if not odd:
            return block, ""
        keep, removed, at = [], [], 0
        for start in sorted(odd):
            end, why = odd[start]
            if len(removed) < MAX_RECORDED:
                self.fc.error(f"line {self.line_no(block, start)}: not read as a step line: {why}")
            keep.append(block[at:start])
            removed.append(block[start:end + 1])
            at = end
        keep.append(block[at:])
        return "".join(keep), "".join(removed)

    def _crash_scan(self, block: str) -> None:
        fc = self.fc
        hints = _CRASH_HINTS
        mask, self.rest_hints = self.rest_hints, None
        if mask is not None:  # one pass: only the hints that occur are looked for below (same lines, same order)
            if not mask:
                return
            hints = [h for i, h in enumerate(_CRASH_HINTS) if mask >> i & 1]
        elif len(block) >= _SHAPES_FROM and block.isascii() and not _may_hold_hint(block):
            return
        if len(block) >= _DEDUPE_FROM and block.endswith("\n"):
            # every rank prints the same setup lines (MXNet BERT 4n8g: 32 Namespace lines of ~4 KB):
            # scan each distinct line once. Same markers in the same order: a repeated line adds
            # nothing to FactCollector.crash_line (same text, same key)
            block = "\n".join(dict.fromkeys(block.split("\n")))
        for hint in hints:
            pos = block.find(hint)
            while pos >= 0:
                start = block.rfind("\n", 0, pos) + 1
                end = block.find("\n", pos)
                fc.crash_line(block[start:end])
                if len(fc.facts.crash_markers) >= 50:
                    return
                pos = block.find(hint, end)

    # ------------------------------------------------------------ helpers for scan()
    def line_no(self, block: str, pos: int) -> int:
        """1-based number of the line holding ``block[pos]`` (for error messages). Counted on from the
        last call's position when it is in the same block and not past ``pos``: a block's bad lines,
        asked for in order, cost one pass over the block, not one each."""
        seen, at, count = self._counted
        if seen is not block or pos < at:
            at = count = 0
        count += block.count("\n", at, pos)
        self._counted = (block, pos, count)
        return self._lineno + count + 1

    @staticmethod
    def line_at(block: str, pos: int) -> tuple[int, str]:
        """(start offset, text) of the line holding ``block[pos]``."""
        start = block.rfind("\n", 0, pos) + 1
        end = block.find("\n", pos)
        return start, block[start:end]

    @staticmethod
    def lines_with(block: str, literal: str) -> Iterable[tuple[int, str]]:
        """Each line (start offset, text) that contains ``literal``, once."""
        pos = block.find(literal)
        while pos >= 0:
            start = block.rfind("\n", 0, pos) + 1
            end = block.find("\n", pos)
            yield start, block[start:end]
            pos = block.find(literal, end)

    @staticmethod
    def lines_holding(block: str, literal: str) -> list[str]:
        """The text of each line of ``block`` that holds ``literal`` (at least 2 characters), once:
        :meth:`lines_with`'s texts, found in one compiled pass where it can (:mod:`._native`)."""
        found = _native.lines(block, literal) if _native.lines is not None else None
        return found if found is not None else [line for _, line in LogStream.lines_with(block, literal)]

    @staticmethod
    def rank_at(block: str, start: int) -> int | None:
        """The ``[1,N]<stdout>:`` rank tag at the start of the line beginning at ``start``."""
        if block.startswith("[", start):
            return strip_tag(block[start:start + 40])[0]
        return None

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.fc.iteration(sample.iteration, sample.rank)
        if self.max_iteration is None or sample.iteration > self.max_iteration:
            self.max_iteration = sample.iteration

    def loss(self, iteration: int, name: str, text: str) -> float | None:
        """Record a loss value; a non-finite one is kept as a fact (the gate refuses the trial)."""
        v = as_float(text)
        if v is None:
            return None
        if not math.isfinite(v):
            self.nonfinite_loss(iteration, name, text)
        return v

    def nonfinite_loss(self, iteration: int, name: str, text: str) -> None:
        bad = self.fc.facts.nonfinite_losses
        if len(bad) < 20:
            bad.append(f"iteration {iteration}: {name} = {text}")

    # ------------------------------------------------------------ results
    def scan(self, block: str) -> str | None:  # pragma: no cover - abstract
        """Read the complete lines of ``block``. May return the text left after removing
        well-formed iteration lines; the crash-marker scan then reads only that (None: all)."""
        raise NotImplementedError

    def finish(self) -> None:
        """Hook: derive facts once the log is complete (before :meth:`result` builds the ParsedLog)."""

    def facts(self) -> LogFacts:
        """A snapshot of the facts so far (iterations and ranks sorted)."""
        return self.fc.snapshot()

    def result(self) -> ParsedLog:
        self.finish()
        facts = self.fc.finish()
        its = facts.iterations_seen
        if len(its) >= 2 and facts.stride is None:
            if its[-1] - its[0] == len(its) - 1:  # sorted distinct ints: every step is 1 (the Counter's answer)
                facts.stride = its[1] - its[0]
            else:
                facts.stride = Counter(map(sub, its[1:], its)).most_common(1)[0][0]
        return ParsedLog(samples=self.samples, facts=facts, extra=self.extra)


def parse_with(stream: LogStream, lines: Iterable[str | bytes]) -> ParsedLog:
    """``Framework.parse(lines)``: each item is a line (trailing newline optional) or any piece
    holding several lines; items are batched into blocks so the cost stays per block."""
    buf: list[str] = []
    size = 0
    for item in lines:
        text = item.decode("utf-8", errors="replace") if isinstance(item, (bytes, bytearray)) else str(item)
        buf.append(text)
        if not text.endswith(("\n", "\r")):
            buf.append("\n")
        size += len(text)
        if size >= 1 << 20:
            stream.feed("".join(buf))
            buf, size = [], 0
    if buf:
        stream.feed("".join(buf))
    return stream.close()


class LineParseStream(LogStream):
    """Fallback for a framework that only has a line parser (``parse`` overridden, no ``Stream``):
    each block's lines go through ``framework.parse`` and the pieces are merged (samples, facts;
    list-valued extras are joined, others replaced)."""

    def __init__(self, framework, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        self.framework = framework

    def _crash_scan(self, block: str) -> None:  # the framework's parse looks for crashes itself
        pass

    def scan(self, block: str) -> None:
        part = self.framework.parse(block.split("\n")[:-1])
        for s in part.samples:
            self.add(s)
        f = part.facts
        for r in f.ranks_seen:
            self.fc.rank(r)
        for m in f.crash_markers:
            if m not in self.fc.facts.crash_markers:
                self.fc.facts.crash_markers.append(m)
        for e in f.errors:
            self.fc.error(e)
        for k, v in part.extra.items():
            if isinstance(v, list) and isinstance(self.extra.get(k), list):
                self.extra[k] = sorted(set(self.extra[k]) | set(v))
            else:
                self.extra[k] = v
