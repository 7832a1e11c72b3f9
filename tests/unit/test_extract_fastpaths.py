"""The extraction fast paths give what the plain code gives: sized reads return the blocks a
buffered reader returns, ``kv_args`` finds what one ``(?:^|[\\s,(])`` pattern finds, the crash scan
reports the same markers in the same order whether repeated lines are scanned once or every time."""

from __future__ import annotations

import os
import random
import re

import pytest

from dlperf_tasks.measure import logtree
from dlperf_tasks.frameworks import _lines
from dlperf_tasks.frameworks._stream import LogStream, kv_args, kv_pattern, literals_in


def _buffered_blocks(path: str, size: int) -> list[bytes]:
    out = []
    with open(path, "rb") as fh:
        while block := fh.read(size):
            out.append(block)
    return out


@pytest.mark.parametrize("size", [0, 1, 6, 7, 8, 999, 1000, 1001, 4321])
def test_sized_reads_give_the_buffered_blocks(tmp_path, monkeypatch, size):
    monkeypatch.setattr(logtree, "BLOCK", 7 if size < 100 else 1000)
    p = tmp_path / "a.log"
    p.write_bytes(os.urandom(size))
    assert list(logtree.read_regular(p)) == _buffered_blocks(str(p), logtree.BLOCK)


def test_sized_reads_follow_a_file_that_grows_while_read(tmp_path, monkeypatch):
    monkeypatch.setattr(logtree, "BLOCK", 1000)
    p = tmp_path / "g.log"
    p.write_bytes(b"a" * 2500)
    blocks = logtree.read_regular(p)
    first = next(blocks)  # fstat said 2500 bytes
    with open(p, "ab") as fh:
        fh.write(b"b" * 3000)
    got = [first, *blocks]
    assert [len(b) for b in got] == [1000] * 5 + [500]
    assert b"".join(got) == b"a" * 2500 + b"b" * 3000


def _kv_reference(text: str, keys: tuple[str, ...] | None) -> dict[str, str]:
    names = r"[A-Za-z_][\w-]*" if keys is None else "|".join(re.escape(k).replace("_", "[_-]") for k in keys)
    rx = re.compile(r"(?:^|[\s,(])(?:--)?(" + names + r")\s*=\s*('[^']*'|\"[^\"]*\"|[^\s,)]+)")
    return {m.group(1).replace("-", "_"): m.group(2).strip("'\"") for m in rx.finditer(text)}


def test_kv_args_matches_the_single_pattern():
    rng = random.Random(3)
    atoms = ["--", "_", "a", "batch_size", "batch-size", "dtype", "=", " = ", ",", " ", "(", ")", "'x y'", '"q,r"',
             "'", "1", "2.5", "\t", "\n", "Namespace(", "total_batch_size", "x=1", "--dtype="]
    for _ in range(20000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 12)))
        for keys in (None, ("batch_size", "dtype"), ("total_batch_size",)):
            got = kv_args(text) if keys is None else kv_args(text, kv_pattern(*keys))
            assert got == _kv_reference(text, keys), (text, keys)
    assert kv_args("batch_size=3, (dtype='f16')", kv_pattern("batch_size", "dtype")) == {"batch_size": "3", "dtype": "f16"}


class _Plain(LogStream):
    def scan(self, block: str) -> None:
        return None


def test_crash_scan_once_per_distinct_line_same_markers(monkeypatch):
    lines = ["INFO: ok\n", "Traceback (most recent call last):\n", "NCCL WARN x failed\n",
             "cudnn MXNET_CUDNN_AUTOTUNE note\n", "RuntimeError: CUDA error: an illegal memory access\n",
             "Killed\n"] + [f"Namespace(a={i}, error_dir='e')\n" for i in range(3)]
    rng = random.Random(5)
    text = "".join(rng.choice(lines) + "x" * rng.randint(0, 3000) + "\n" for _ in range(200))
    assert len(text) > 64 * 1024
    markers = []
    for dedupe_from in (1 << 40, 1):  # never / always scanned once per distinct line
        monkeypatch.setattr("dlperf_tasks.frameworks._stream._DEDUPE_FROM", dedupe_from)
        st = _Plain()
        st.feed(text)
        markers.append(st.close().facts.crash_markers)
    assert markers[0] and markers[0] == markers[1]


def test_mxnet_speeds_by_step_same_in_step_order_and_any_order():
    from dlperf_tasks.frameworks.mxnet_bert import _speeds_by_step
    from dlperf_tasks.core.model import Samples

    rng = random.Random(7)
    rows = [(step, rng.uniform(200.0, 300.0)) for step in range(1, 31) for _rank in range(4)]
    rows += [(12, 250.0)]  # a step with one line more

    def cols(rs):
        s = Samples()
        s.add_columns([r[0] for r in rs], [r[1] for r in rs], "ms/iter")
        return s

    ordered = sorted(rows, key=lambda r: r[0])
    shuffled = rows[:]
    rng.shuffle(shuffled)
    a = _speeds_by_step(cols(ordered), 5, 25, 1000.0 * 32 * 4)
    b = _speeds_by_step(cols(shuffled), 5, 25, 1000.0 * 32 * 4)
    assert sorted(a) == list(range(6, 26))  # lo < step <= hi
    assert {k: sorted(v) for k, v in a.items()} == {k: sorted(v) for k, v in b.items()}
    assert len(a[12]) == 5 and a[6][0] == pytest.approx(128000.0 / ordered[20][1])


def _bars(n: int, rng: random.Random) -> str:
    return "".join(f"Iteration:  {rng.randint(0, 99)}%|#  | {i}/1646 [00:{rng.randint(10, 59)}<1:0{i % 10}:29, "
                   f" {rng.random():.2f}it/s]\n" for i in range(n))


@pytest.mark.parametrize("hint", _lines._CRASH_HINTS)
def test_crash_shape_check_finds_every_hint_among_digit_noise(monkeypatch, hint):
    """Issue 28: the digit-free line shapes hold a hint exactly when the text does, so skipping the
    per-hint scan when the shapes hold none never loses a marker."""
    from dlperf_tasks.frameworks._stream import _SHAPES_FROM, _may_hold_hint

    rng = random.Random(hint)
    text = _bars(200, rng) + f"12:0{rng.randint(0, 9)} 7{hint}3 at 0x1f2\n" + _bars(200, rng)
    assert len(text) >= _SHAPES_FROM and _may_hold_hint(text)
    assert not _may_hold_hint(text.replace(hint, "-"))
    real = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    text = _bars(300, rng) + real + _bars(10, rng)
    markers = []
    for shapes_from in (1 << 40, 1):  # never / always checked by shape first
        monkeypatch.setattr("dlperf_tasks.frameworks._stream._SHAPES_FROM", shapes_from)
        st = _Plain()
        st.feed(text)
        markers.append(st.close().facts.crash_markers)
    assert markers[0] and markers[0] == markers[1]


def test_the_shape_check_never_hides_a_hint():
    """Lines that differ only in their digits are checked once; a hint on any line is still found."""
    from dlperf_tasks.frameworks import _stream

    rng = random.Random(5)
    first = _bars(300, rng)
    assert not _stream._may_hold_hint(first)
    for hint in _lines._CRASH_HINTS:
        assert _stream._may_hold_hint(first + f"[1,0]<stderr>: 42 {hint} 7\n" + first), hint


def test_clock_seconds_same_doubles_as_the_plain_sum():
    from dlperf_tasks.frameworks._lines import clock_seconds

    rng = random.Random(11)
    for _ in range(300):
        n = rng.randint(1, 200)
        day = 86400.0 * rng.randint(0, 30000)
        h = [f"{rng.randint(0, 23):02d}" for _ in range(n)]
        m = [str(rng.randint(0, 59)) for _ in range(n)]
        s = [f"{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}" for _ in range(n)]
        assert clock_seconds(day, h, m, s) == [day + (int(a) * 3600 + int(b) * 60) + float(c) for a, b, c in zip(h, m, s)]
    with pytest.raises(ValueError):
        clock_seconds(0.0, ["1"], ["x"], ["1.0"])


def test_sample_bounds_skip_only_units_they_never_bound():
    from dlperf_tasks.core.model import MetricKind, Samples
    from dlperf_tasks.measure.validity import sample_bound_problems

    s = Samples()
    s.add_columns([1, 2], [1e-300, 1e12], "s")  # timestamps: no bound applies
    assert sample_bound_problems(s, 8, 100.0, MetricKind.LATENCY) == []
    s.add_columns([3], [1e-300], "ms/iter")
    assert "below the plausible floor" in sample_bound_problems(s, 8, 100.0, MetricKind.LATENCY)[0]


def test_literals_in_reads_the_line_shapes_as_the_text():
    """``literals_in`` looks in the distinct digit-less line shapes of a long text: the same bits as ``in``."""
    from dlperf_tasks.frameworks import pytorch_bert_stream as pb

    rng = random.Random(9)
    pieces = ["Iteration: 12\n", "  3%|#  | 41/1000\n", "PARAMETER", "Traceback", "torchrun ", "7", "\n",
              "CUDA out of memory", "x" * 50, "skipped_steps : 3\n", "a0b"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 600)))
        want = sum(1 << i for i, lit in enumerate(pb._SCAN_LITERALS) if lit in text)
        assert literals_in(text, pb._SCAN_LITERALS) == want
