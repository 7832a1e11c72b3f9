"""Lines that repeat a step record, or one field, many times are parsed in linear time on both paths
(the compiled scanner and pure Python): such a line is refused as a step line with the reason, never
backtracked through (bench/bench_extract.py --hostile checks the bound in seconds per MiB)."""

from __future__ import annotations

import random
import time

import pytest

from dlperf_tasks.frameworks import _native, get
from dlperf_tasks.frameworks._stream import MAX_STEP_LINE, long_lines

RECORD = "[step 1]\tmlm_loss=1\tnsp_loss=1\tthroughput=1 latency=1 "
GOOD = "INFO:root:[step 2]\tmlm_loss=7.38695\tnsp_loss= 0.72\tthroughput=16.0K tks/s\tlr=0.0000505 time=0.24, " \
       "latency=240.6 ms/batch\n"
HOSTILE = {
    # a step record repeated without its unit: each '[step ' start used to scan the rest of the line
    "repeated record": "\n".join([RECORD * (128 * 1024 // len(RECORD))] * 4) + "\n",
    # one '[step' then 64 KiB of 'latency=': each 'latency=' used to be tried against the rest of the line
    "repeated field": "[step 1] mlm_loss=1 nsp_loss=1 throughput=" + "latency=" * (64 * 1024 // 8) + "\n",
    # short step lines, each unreadable: their line numbers are counted once per block, not once per line
    "short bad lines": (RECORD + "x" * 200 + "\n") * (2 * 1024 * 1024 // 256),
    # short lines (under the cap) that repeat the field: linear too, not only capped
    "short repeats": ("[step 1] mlm_loss=1 nsp_loss=1 throughput=" + "latency=" * 200 + "\n") * 400,
}


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_step_lines_take_milliseconds_and_are_named(monkeypatch, name, compiled):
    if not compiled:
        monkeypatch.setattr(_native, "mxbert_scan", None)
    st = get("mxnet_bert").stream()
    t0 = time.process_time()
    st.feed(GOOD + HOSTILE[name] + GOOD.replace("step 2", "step 3"))
    parsed = st.close()
    cpu = time.process_time() - t0
    assert cpu < 1.0, f"{name}: {cpu:.2f} CPU-s for {len(HOSTILE[name]) >> 10} KiB (quadratic?)"
    assert list(parsed.samples.iteration) == [2, 3]  # the good lines around it are still read
    first = parsed.facts.errors[0] if parsed.facts.errors else ""
    assert first.startswith("line 2: ") and ("not read as a step line" in first or "'latency='" in first), first


def test_a_real_step_line_is_far_under_the_cap():
    assert len(GOOD) * 8 < MAX_STEP_LINE


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 64])
def test_long_lines_finds_exactly_the_lines_over_the_limit(limit):
    rng = random.Random(limit)
    for _ in range(300):
        lines = ["x" * rng.choice([0, 1, limit - 1, limit, limit + 1, 3 * limit, rng.randint(0, 4 * limit)])
                 for _ in range(rng.randint(0, 12))]
        text = "\n".join(lines) + rng.choice(["", "\n"])
        want, pos = [], 0
        for line in text.split("\n"):
            if len(line) > limit:
                want.append((pos, pos + len(line)))
            pos += len(line) + 1
        assert long_lines(text, limit) == want, (limit, lines)
