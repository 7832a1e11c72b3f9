"""Progress lines: at most one per trial every few seconds (and the last iteration), with the
speed rounded and its unit, an ETA, and the end as ``OK <value> <unit>``."""

from __future__ import annotations

import io

from dlperf_tasks.engine.progress import Display
from dlperf_tasks.model import Cell, Trial, TrialMetric, TrialResult, TrialStatus, Window
from dlperf_tasks.topology import Topology


def _trial() -> Trial:
    return Trial(Cell("s", "smoke_bert", "m", "fp32", 8, Topology.parse("1n2g"), window=Window(5, 20)), 1)


def test_lines_every_few_seconds_with_speed_eta_and_the_rounded_end():
    now = [0.0]
    out = io.StringIO()
    d = Display(out, 1, every_s=5, clock=lambda: now[0])
    t = _trial()
    d.started(t, ["local0"])
    for second in range(1, 12):  # one iteration per second
        now[0] = float(second)
        d.iteration(t, ["local0"], second, 25)
    now[0] = 25.0
    d.iteration(t, ["local0"], 25, 25)  # the last iteration is always shown
    d.finished(TrialResult(t, TrialStatus.OK, metric=TrialMetric(82.72749999999999), nodes=["local0"]))
    lines = out.getvalue().splitlines()
    progress = [x for x in lines if "iteration" in x]
    assert len(progress) == 3, lines  # at 5 s, 10 s, and the last iteration
    assert progress[0].endswith("iteration 5/25, 1 it/s (~16 samples/s), ETA 20 s")
    assert progress[-1].endswith("iteration 25/25, 1 it/s (~16 samples/s)")
    assert lines[-1].endswith("[1/1] OK 82.73 samples/s s/bz8/fp32/1n2g trial 1 on local0 (attempt 1)")


def test_a_task_log_gets_marked_lines():
    got = []
    d = Display(got.append, 1)
    d.started(_trial(), ["node1"])
    assert got == ["dlperf: start  s/bz8/fp32/1n2g trial 1 on node1"]
