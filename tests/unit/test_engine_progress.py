"""Progress lines: at most one per trial every few seconds (and the last iteration), with the
speed in the result's unit counted like the speed rule (start-up and warm-up excluded), a
realistic ETA, and the end as ``[done/planned] OK <value> <unit>``; a DAG run's tasks count the
trials done over the whole DAG run."""

from __future__ import annotations

import io

from dlperf_tasks.engine.progress import Display, samples_per_iteration
from dlperf_tasks.core.model import Cell, ParallelLayout, Trial, TrialMetric, TrialResult, TrialStatus, Window
from dlperf_tasks.core.topology import Topology


def _trial(topo: str = "1n2g", window: Window = Window(5, 20), **kw) -> Trial:
    return Trial(Cell("s", "smoke_bert", "m", "fp32", 8, Topology.parse(topo), window=window, **kw), 1)


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
    # 1 it/s x 8 samples x 2 ranks: global samples/s, the result's unit
    assert progress[0].endswith("iteration 5/25, 16 samples/s, ETA 20 s"), progress[0]
    assert progress[-1].endswith("iteration 25/25, 16 samples/s")
    assert lines[-1].endswith("[1/1] OK 82.73 samples/s s/bz8/fp32/1n2g trial 1 on local0 (attempt 1)")


def test_speed_and_eta_exclude_start_up_and_warm_up_like_the_speed_rule():
    """The old line divided by the time since the trial started (container start, imports,
    warm-up): 25 iterations at 20 it/s after 20 s of start-up read ~1.2 it/s, ETA minutes."""
    now = [0.0]
    out = io.StringIO()
    d = Display(out, 1, every_s=0.5, clock=lambda: now[0])
    t = _trial("1n1g", Window(5, 20))
    d.started(t, ["n"])
    now[0] = 20.0  # start-up: nothing printed, no speed
    d.iteration(t, ["n"], 0, 25)
    now[0] = 21.0  # warm-up: slow iterations (compilation), 1 it/s
    d.iteration(t, ["n"], 1, 25)
    now[0] = 25.0
    d.iteration(t, ["n"], 5, 25)  # warm-up ends here
    now[0] = 25.5
    d.iteration(t, ["n"], 15, 25)  # 20 it/s measured
    lines = [x for x in out.getvalue().splitlines() if "iteration" in x]
    assert lines[0].endswith("iteration 1/25"), lines  # one sighting: no speed yet, no made-up ETA
    assert lines[1].endswith("iteration 5/25, 8 samples/s, ETA 20 s"), lines  # from the first iteration seen
    assert lines[2].endswith("iteration 15/25, 160 samples/s, ETA 0 s"), lines  # 20 it/s x 8: post warm-up


def test_samples_per_iteration_counts_accumulation_and_the_layout_global_batch():
    assert samples_per_iteration(_trial("2n4g").cell) == 64
    assert samples_per_iteration(_trial("1n2g", accumulation=4).cell) == 64
    lay = ParallelLayout(group="DP", case="DP_x", dp=2, mp=1, pp=1, micro_batch=2, global_batch=32, hidden_size=8, num_heads=2, num_layers=2)
    assert samples_per_iteration(_trial("1n2g", layout=lay).cell) == 32


def test_latency_suites_show_ms_per_iteration():
    t = Trial(Cell("g", "megatron_gpt", "gpt", "amp", 2, Topology.parse("1n1g"), window=Window(0, 10)), 1)
    now = [0.0]
    out = io.StringIO()
    d = Display(out, 1, every_s=0, clock=lambda: now[0])
    d.iteration(t, ["n"], 1, 10)
    now[0] = 2.0
    d.iteration(t, ["n"], 5, 10)  # 2 it/s = 500 ms/iter
    assert out.getvalue().splitlines()[-1].endswith("iteration 5/10, 500 ms/iter (~4 samples/s), ETA 2 s")


def test_a_dag_task_counts_done_over_the_whole_dag_run():
    got = []
    d = Display(got.append, 12, count_done=lambda key: 7)
    t = _trial()
    d.finished(TrialResult(t, TrialStatus.OK, metric=TrialMetric(10.0), nodes=["n"]))
    assert got[-1].startswith("dlperf: [7/12] OK 10.00 samples/s"), got
    broken = Display(got.append, 12, count_done=lambda key: 1 / 0)  # never fails the trial
    broken.finished(TrialResult(t, TrialStatus.OK, metric=TrialMetric(10.0), nodes=["n"]))
    assert got[-1].startswith("dlperf: [1/12] OK"), got


def test_a_task_log_gets_marked_lines():
    got = []
    d = Display(got.append, 1)
    d.started(_trial(), ["node1"])
    assert got == ["dlperf: start  s/bz8/fp32/1n2g trial 1 on node1"]
