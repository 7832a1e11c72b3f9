"""``_lines.step_window`` answers a repeated question (check() then trial_metric() of one trial) from its
one-entry memo: the same answer as a fresh computation, and a new Samples / other arguments / a longer
column are computed again."""

from __future__ import annotations

from dlperf_tasks.core.model import Sample
from dlperf_tasks.core.samples import Samples
from dlperf_tasks.frameworks import _lines


def _samples(n: int, t0: float = 0.0) -> Samples:
    return Samples([Sample(i, t0 + 0.5 * i, "s", 0, None, None, None) for i in range(1, n + 1)])


def test_memo_same_answer_and_recomputed_on_change():
    s = _samples(150)
    first = _lines.step_window(s, 1, 20, 120, 5)
    assert (first[0].iteration, first[1].iteration, first[1].value) == (25, 125, 62.5)
    assert _lines.step_window(s, 1, 20, 120, 5) is first
    other = _lines.step_window(s, 1, 10, 120, 5)
    assert other[0].iteration == 15
    assert _lines.step_window(_samples(150, 100.0), 1, 20, 120, 5)[1].value == 162.5
    short = _samples(100)
    assert _lines.step_window(short, 1, 20, 120, 5) == (None, 125)
    assert _lines.step_window(_samples(130), 1, 20, 120, 5)[1].iteration == 125
    a, b = _lines.step_window(s, 1, 20, 120, 5)
    fresh = Samples(list(s))
    assert _lines.step_window(fresh, 1, 20, 120, 5) == (a, b)
