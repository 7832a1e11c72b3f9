"""The compiled ``_native.log_text`` (``_cdll.text``) and ``_native.lines`` give what the Python paths give.

``log_text`` gives what ``LogStream.feed``'s Python path makes of
a log's bytes: tqdm's bar glyphs read as ``#``, ``\\r\\n`` and ``\\r`` as ``\\n`` (a pair cut between two
pieces too), None for any other non-ASCII byte (the Python decoder then reads the piece).

Each input is parsed twice, with the compiled function and with it set to None (the reference), fed in
pieces of several sizes, and the whole ParsedLog is compared; the function is also checked on its own.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import _native
from dlperf_tasks.frameworks import pytorch_bert_stream as pb
from dlperf_tasks.frameworks._lines import MAX_LINE
from dlperf_tasks.frameworks._stream import _BAR_GLYPHS, LogStream

FIXTURE = (Path(__file__).resolve().parents[1] / "data/fixture_logs/pytorch_bert/fp16_ngc_bert_b96/pytorch/1n1g"
           / "bert-base-adam-training_b96_fp16_1.log")
BAR = "Iteration:  10%|█▏        | 165/1646 [00:42<06:20,  3.89it/s]".encode()


class Lines(LogStream):
    """Keeps every line it is given: what feed() made of the bytes, line for line."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def scan(self, block: str) -> str:
        self.seen.append(block)
        return block


def python_text(data: bytes) -> str:
    return _BAR_GLYPHS.sub(b"#", data).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def feed(stream: LogStream, data: bytes, piece: int):
    for i in range(0, len(data), piece):
        stream.feed(data[i:i + piece])
    return stream.close(), stream


def both(monkeypatch, data: bytes, piece: int, make=Lines):
    calls = []
    real = _native.log_text

    def spy(chunk, after_cr):
        out = real(chunk, after_cr)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(_native, "log_text", spy)
    fast_log, fast = feed(make(), data, piece)
    monkeypatch.setattr(_native, "log_text", None)
    slow_log, slow = feed(make(), data, piece)
    return (fast_log, fast), (slow_log, slow), calls


def _inputs() -> dict[str, bytes]:
    rng = random.Random(34)
    atoms = [b"a", b"0", b" ", b"\n", b"\r", b"\r\n", b"\x00", "█".encode(), "▏".encode(), "▉".encode(),
             "é".encode(), "\u2580".encode(), "\u259f".encode(), "\u25a0".encode(), b"\xe2\x96", b"\xe2", b"\xff"]
    out = {
        "fixture": FIXTURE.read_bytes(),
        "bars_cr": b"start\n" + b"\r".join([BAR] * 40) + b"\r\nend\n",
        "cr_only": b"a\rb\r\rc\r",
        "crlf_pairs": b"x\r\n\r\ny\r\n",
        "lf_first": b"\n\nz\n",
        "glyph_last": b"abc\n" + "█".encode(),
        "other_unicode": "naïve\r\n█ done\n".encode(),
        # longer than MAX_LINE: the line is cut there and the rest of it skipped (line counts adjusted)
        "over_long_line": b"a\r\n" + b"x" * (MAX_LINE + 100) + b"\r" + BAR * 3 + b"\n" + b"y" * (3 * MAX_LINE) + b"\r\nz\n",
    }
    for k in range(40):
        out[f"random_{k}"] = b"".join(rng.choice(atoms) for _ in range(rng.randint(1, 400)))
    return out


INPUTS = _inputs()


def test_the_compiled_functions_are_built():
    assert _native.log_text is not None and _native.lines is not None and "_cdll" not in _native.problems


LITERALS = ("PARAMETER", "training_sequences_per_second", "torch.distributed.launch", "ab", "a\nb", "zz")


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_lines_holding_a_literal_same_as_lines_with(name):
    text = python_text(INPUTS[name])
    for t in (text, text.rstrip("\n"), text + "ab", "ab" + text):
        for literal in LITERALS:
            want = [line for _, line in LogStream.lines_with(t, literal)]
            got = _native.lines(t, literal)
            assert got == (want if t.isascii() else None), (literal, t[:80])
            assert LogStream.lines_holding(t, literal) == want


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_same_as_the_python_reading(name):
    data = INPUTS[name]
    got = _native.log_text(data, False)
    ascii_after_glyphs = _BAR_GLYPHS.sub(b"#", data).isascii()
    assert (got is not None) == ascii_after_glyphs
    if got is not None:
        want = python_text(data)
        assert got == (want, want.count("\n"))
        assert got[0].isascii() and "\r" not in got[0]
        want = python_text(data[1:] if data.startswith(b"\n") else data)
        assert _native.log_text(data, True) == (want, want.count("\n"))


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("piece", [1 << 20, 4096, 97, 7])
def test_feed_same_lines_and_facts(monkeypatch, name, piece):
    (fast_log, fast), (slow_log, slow), _ = both(monkeypatch, INPUTS[name], piece)
    assert "".join(fast.seen) == "".join(slow.seen)
    assert repr(fast_log.facts) == repr(slow_log.facts)  # the line count included
    assert fast_log.facts.lines == "".join(slow.seen).count("\n")


@pytest.mark.parametrize("piece", [1 << 20, 4096, 777])
def test_pytorch_bert_same_parsed_log_and_the_compiled_path_is_taken(monkeypatch, piece):
    data = b"\r".join([BAR] * 30) + b"\r\n" + FIXTURE.read_bytes().replace(b"\n", b"\r\n")
    (fast_log, _), (slow_log, _), calls = both(monkeypatch, data, piece, pb.PytorchBertStream)
    assert any(calls)
    cols = ("iteration", "value", "timestamp", "loss")
    assert [list(getattr(fast_log.samples, c)) for c in cols] == [list(getattr(slow_log.samples, c)) for c in cols]
    assert repr(fast_log.facts) == repr(slow_log.facts) and len(fast_log.samples) == 150


def test_plain_ascii_without_cr_is_left_to_the_decoder(monkeypatch):
    (_, fast), _, calls = both(monkeypatch, b"plain\nlines\n", 1 << 20)
    assert calls == [] and fast.seen == ["plain\nlines\n"]
