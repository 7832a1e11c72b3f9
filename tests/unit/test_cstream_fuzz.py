"""The C block passes (``_cstream``) and the DLL line reader (``_cdll``) against their Python definitions,
on seeded random inputs: random mutations of real PyTorch BERT lines (whole ParsedLog, C vs Python),
``_cdll.scan`` against ``_DLL_FAST.split``, ``bars`` / ``newlines`` / ``which`` against the Python
expressions they replace."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import _stream
from dlperf_tasks.frameworks import pytorch_bert_stream as pb
from dlperf_tasks.frameworks._lines import _CRASH_HINTS
from tests.unit.test_cdll_parity import parse  # the log fed in pieces of a given size

_cdll = pytest.importorskip("dlperf_tasks.frameworks._cdll")
_cstream = pytest.importorskip("dlperf_tasks.frameworks._cstream")

FIXTURE = (Path(__file__).resolve().parents[1] / "data/fixture_logs/pytorch_bert/fp16_ngc_bert_b96/pytorch/2n8g/"
           "bert-base-adam-training_b96_fp16_1.log")
LINES = FIXTURE.read_bytes().decode("utf-8").split("\n")
DLL = [ln for ln in LINES if "Training Iteration" in ln]
NOISE = "0123456789 .-:_eE+\t\r\x00\x1c\x1fDLLnaif#x\u00e9\u2588\n"


def mutate(rng: random.Random, line: str) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(line) + 1)
        op = rng.randrange(5)
        if op == 0:
            line = line[:i] + rng.choice(NOISE) + line[i + 1:]
        elif op == 1:
            line = line[:i] + line[i + 1:]
        elif op == 2:
            line = line[:i] + rng.choice(NOISE) * rng.randint(1, 25) + line[i:]
        elif op == 3:
            line = line[:i]
        else:
            j = rng.randrange(len(line) + 1)
            line = line[:i] + line[min(i, j):max(i, j)] + line[i:]
    return line


def key(parsed) -> tuple:
    s = parsed.samples
    return (tuple(list(map(repr, getattr(s, c))) for c in ("iteration", "value", "timestamp", "loss", "rank")),
            repr(parsed.facts), repr(parsed.extra))


def scan_reference(block: str):
    """What ``_cdll.scan`` must return when it does not fall back, from the regex."""
    parts = pb._DLL_FAST.split(block)
    rows = list(zip(*(parts[i::11] for i in range(1, 11))))
    ts = []
    for y, mo, d, h, mi, secs, _e, _s, _n, _v in rows:
        ts.append(pb._day_seconds(y, mo, d) + (int(h) * 3600 + int(mi) * 60) + float(secs))
    return ("".join(parts[0::11]), block.count("Training Epoch: "), [int(r[7]) for r in rows], ts,
            [float(r[9]) if r[9] is not None else None for r in rows])


def test_mutated_logs_same_parsed_log(monkeypatch):
    rng = random.Random(28)
    fast_seen = 0
    for case in range(300):
        lines = list(LINES)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(lines))
            lines[at] = mutate(rng, rng.choice(DLL) if rng.random() < 0.7 else lines[at])
        text = "\n".join(lines)
        data = text.encode("utf-8") if case % 2 else text
        piece = rng.choice([1 << 20, 5000, 333])
        fast = key(parse(data, piece))
        with monkeypatch.context() as m:
            m.setattr(pb, "_cdll", None)
            m.setattr(pb, "_cstream", None)
            m.setattr(_stream, "_cstream", None)
            slow = key(parse(data, piece))
        assert fast == slow, (case, [ln for ln in lines if ln not in LINES])
        block = _stream._BAR_GLYPHS.sub(b"#", text.encode()).decode()
        got = _cdll.scan(block)
        if got is not None:
            fast_seen += 1
            assert got == scan_reference(block), case
    assert fast_seen > 30  # the C path took part


def test_scan_lines_one_by_one_against_the_regex():
    rng = random.Random(7)
    for _ in range(3000):
        line = mutate(rng, rng.choice(DLL))
        block = line + "\n" + rng.choice(DLL) + "\n"
        got = _cdll.scan(block)
        if got is None:
            assert not block.isascii() or _needs_python(block), repr(line)
        else:
            assert got == scan_reference(block), repr(line)


def _needs_python(block: str) -> bool:
    """A block ``_cdll.scan`` may leave to Python: a match without a plain finite loss, two dates, an
    invalid date, a long step, steps not increasing."""
    parts = pb._DLL_FAST.split(block)
    rows = list(zip(*(parts[i::11] for i in range(1, 11))))
    if not rows:
        return False
    if any(r[9] is None or not re.fullmatch(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?", r[9]) or len(r[7]) > 18
           for r in rows):
        return True
    if len({r[:3] for r in rows}) > 1:
        return True
    try:
        pb._day_seconds(*rows[0][:3])
    except ValueError:
        return True
    steps = [int(r[7]) for r in rows]
    return any(b <= a for a, b in zip(steps, steps[1:])) or any(
        not -1e308 < float(r[9]) < 1e308 or len(r[9]) > 64 for r in rows)


def test_bars_like_the_regex():
    rng = random.Random(3)
    alphabet = [b"\xe2", b"\x96", b"\x80", b"\x9f", b"\xa0", b"\x7f", b"a", b"\n", "\u2588".encode(),
                "\u259f".encode(), "\u2590".encode(), "\u25a0".encode(), "\u2580".encode()]
    for _ in range(2000):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert _cstream.bars(data) == _stream._BAR_GLYPHS.sub(b"#", data), data


def test_newlines_like_replace():
    rng = random.Random(4)
    for _ in range(2000):
        text = "".join(rng.choice("\r\n\x00ab") for _ in range(rng.randint(0, 30)))
        assert _cstream.newlines(text) == text.replace("\r\n", "\n").replace("\r", "\n"), repr(text)
    assert _cstream.newlines("\u00e9\r\n") is None


def test_which_like_in():
    rng = random.Random(5)
    literals = pb._SCAN_LITERALS
    long_ones = pb._LITERALS
    pieces = list(literals) + ["CU", "rro", "torc", "PARAMETE", "\n", "x", "ORTE", "exi", "skipped_steps :"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        for lits in (literals, long_ones, _CRASH_HINTS):
            want = sum(1 << i for i, lit in enumerate(lits) if lit in text)
            assert _cstream.which(text, lits) == want, (repr(text), lits)
    assert _cstream.which("\u00e9 Traceback", _CRASH_HINTS) is None
    with pytest.raises(ValueError):
        _cstream.which("x", ("a",))


class _CrashOnly(_stream.LogStream):
    """The generic block work only (feed's normalisation, line counts, the crash-marker scan)."""

    def scan(self, block: str) -> None:
        self.extra.setdefault("blocks", []).append(block)


_ALL_LOGS = sorted(p for d in ("genuine_logs", "fixture_logs") for p in (FIXTURE.parents[5] / d).rglob("*")
                   if p.is_file() and p.suffix in (".log", ".gz", ".txt", ".out"))


def test_generic_block_work_same_on_every_log(monkeypatch):
    import gzip

    assert len(_ALL_LOGS) > 50
    for path in _ALL_LOGS:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        noisy = data.replace(b"\n", b"\r\n", 40).replace(b"a", b"\x00a", 5)
        for blob, piece in ((data, 1 << 20), (noisy, 4093)):
            def run():
                st = _CrashOnly()
                for i in range(0, len(blob), piece):
                    st.feed(blob[i:i + piece])
                return repr(st.close().facts), st.extra.get("blocks")

            fast = run()
            with monkeypatch.context() as m:
                m.setattr(_stream, "_cstream", None)
                slow = run()
            assert fast == slow, path


def test_count_nl_and_lines_with_like_python():
    rng = random.Random(6)
    for _ in range(3000):
        text = "".join(rng.choice(["\n", "ab", "PARAM", "ETER", "x" * rng.randint(0, 20), "P"])
                       for _ in range(rng.randint(0, 15)))
        assert _cstream.count_nl(text) == text.count("\n"), repr(text)
        for lit in ("PARAMETER", "P", "ab\nx", "ETERx"):
            got = _cstream.lines_with(text, lit)
            if text.endswith("\n") and "\n" not in lit:
                assert got == list(_stream._lines_with(text, lit)), (repr(text), lit)
            else:
                assert got is None
    for n in (2039, 2040, 2041, 4096, 70000):  # past 255 words of 8: the per-byte counters are summed
        text = "\n" * n + "a\n" * 3 + "\x0b" * 7
        assert _cstream.count_nl(text) == text.count("\n") == n + 3
    assert _cstream.count_nl("\u00e9\n") is None and _cstream.lines_with("\u00e9 P\n", "P") is None


def test_which_random_literals_and_edges():
    """Random literal tuples (the anchor cache switches between them) over short texts of few
    characters: occurrences at the text's start and end, overlapping, repeated anchors."""
    rng = random.Random(11)
    alphabet = "abcxyzKQ_ "
    for _ in range(1500):
        lits = tuple("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6))) for _ in range(rng.randint(0, 8)))
        for _ in range(3):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            want = sum(1 << i for i, lit in enumerate(lits) if lit in text)
            assert _cstream.which(text, lits) == want, (repr(text), lits)
    lits = tuple(chr(65 + i) * 2 for i in range(63))
    assert _cstream.which("AAZZ", lits) == 1 | 1 << 25
    assert _cstream.which("", lits) == 0
