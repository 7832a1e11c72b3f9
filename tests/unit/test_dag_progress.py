"""A DAG run's trial tasks count the trials done over the whole DAG run: each task
runs one trial in its own work dir, so a per-task display said ``[1/1]`` for every trial. The
plan hands every item the DAG run's planned count; done = the trial records staged by every
task (one local store, two work dirs, no mocks)."""

from __future__ import annotations

from pathlib import Path

from dlperf_tasks.engine import setup, trials
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.core.model import TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.engine.runset import TrialItem
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.engine import staging

PARAMS = {"topologies": ["1n1g"], "trials": 3, "warmup_iters": 1, "measure_iters": 2}


def _settings(tmp_path: Path, worker: str) -> Settings:
    return Settings(work_dir=str(tmp_path / worker), store_url=f"file://{tmp_path / 'store'}")


def test_each_trial_task_shows_done_over_planned_for_the_whole_dag_run(tmp_path):
    planner = _settings(tmp_path, "wp")
    rs = setup.plan_runs("smoke", ["smoke"], PARAMS, planner, group_run_id="manual__2026-01-01")
    staging.leave(rs, planner)
    assert [i.planned for i in rs.trials] == [3, 3, 3]
    lines: list[str] = []
    for n, item in enumerate(rs.trials):
        worker = _settings(tmp_path, f"w{n}")  # every task on its own worker: no shared disk
        local = staging.enter_trial(item, worker)
        res = TrialResult(trial=local.trial, status=TrialStatus.OK, metric=TrialMetric(value=50.0), nodes=["local0"])
        RunDir(Path(local.run_dir), local.run_id).save_trial(res)
        trials.display_for(local, lines.append, worker).finished(res)
        # a retried trial (same key) is not counted twice
        if n == 0:
            trials.display_for(local, lines.append, worker).finished(res, attempt=2)
        staging.leave_trial(local, worker)
    heads = [x.split(" OK ")[0] for x in lines]
    assert heads == ["dlperf: [1/3]", "dlperf: [1/3]", "dlperf: [2/3]", "dlperf: [3/3]"], lines


def test_an_item_without_a_plan_count_keeps_its_own_count(tmp_path):
    got: list[str] = []
    trial = setup.plan_runs("smoke", ["smoke"], PARAMS, _settings(tmp_path, "wp")).trials[0].trial
    item = TrialItem(run_id="r", run_dir="/nonexistent", suite="smoke", trial=trial)
    d = trials.display_for(item, got.append, settings=None)
    assert d.total == 1 and d.count_done is None
