"""The DLL line reader (``_cdll``) against its Python definition, on seeded random inputs: random
mutations of real PyTorch BERT lines (whole ParsedLog, C vs Python), ``_cdll.scan`` against
``_DLL_FAST.split``. ``make fuzz`` runs the same comparison longer, under the sanitizers."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import _cdll, _native  # an ImportError fails: `make install` builds it
from dlperf_tasks.frameworks import _stream
from dlperf_tasks.frameworks import pytorch_bert_stream as pb
from tests.unit.test_cdll_parity import parse  # the log fed in pieces of a given size

#: ``make fuzz`` runs more cases, from its own seed, against a sanitizer build (scripts/fuzz-scanners.sh)
CASES = int(os.environ.get("DLPERF_FUZZ_CASES", "300"))
SEED = int(os.environ.get("DLPERF_FUZZ_SEED", "0"))


def test_the_fuzz_build_is_the_one_loaded():
    build = os.environ.get("DLPERF_FUZZ_BUILD")
    assert build is None or _cdll.__file__.startswith(build), _cdll.__file__

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
    rng = random.Random(28 + SEED)
    fast_seen = 0
    for case in range(CASES):
        lines = list(LINES)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(lines))
            lines[at] = mutate(rng, rng.choice(DLL) if rng.random() < 0.7 else lines[at])
        text = "\n".join(lines)
        data = text.encode("utf-8") if case % 2 else text
        piece = rng.choice([1 << 20, 5000, 333])
        fast = key(parse(data, piece))
        with monkeypatch.context() as m:
            m.setattr(_native, "dll_scan", None)
            slow = key(parse(data, piece))
        assert fast == slow, (case, [ln for ln in lines if ln not in LINES])
        block = _stream._BAR_GLYPHS.sub(b"#", text.encode()).decode()
        got = _cdll.scan(block)
        if got is not None:
            fast_seen += 1
            assert got == scan_reference(block), case
    assert fast_seen > 30  # the C path took part


def test_scan_lines_one_by_one_against_the_regex():
    rng = random.Random(7 + SEED)
    for _ in range(10 * CASES):
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


def test_which_like_in_on_random_literals_and_texts():
    """``_cdll.which`` (the one-pass literal search) gives the bits ``literal in text`` gives."""
    rng = random.Random(11 + SEED)
    alphabet = "abcxyzKQ_ \n0"
    for _ in range(CASES * 5):
        lits = tuple("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 6))) for _ in range(rng.randint(0, 8)))
        for _ in range(3):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            want = sum(1 << i for i, lit in enumerate(lits) if lit in text)
            assert _cdll.which(text, lits) == want, (repr(text), lits)
    lits = tuple(chr(65 + i) * 2 for i in range(63))
    assert _cdll.which("AAZZ", lits) == 1 | 1 << 25 and _cdll.which("", lits) == 0
    assert _cdll.which("\u00e9 Traceback", ("Traceback",)) is None
    assert _native.literals is _cdll.which
    with pytest.raises(ValueError):
        _cdll.which("x", ("a",))
