"""Staging between tasks on different workers: two work dirs, one local store,
no mocks. A trial's files travel through the store only; a re-run overwrites nothing valid;
staging is private (never a published run)."""

import json
from pathlib import Path

import pytest

from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.model import Cell, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.engine import staging
from dlperf_tasks.engine.runset import RunEntry, RunSet, TrialItem
from dlperf_tasks.store import Store
from dlperf_tasks.core.topology import Topology

RUN_ID = "smoke-20260101T000000-abc123"
LOG = "logs/smoke/t1.log"


def _settings(tmp_path: Path, worker: str) -> Settings:
    return Settings.load(env={}, store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / worker),
                         cluster="local")


def _trial() -> Trial:
    cell = Cell(suite="smoke", framework="smoke_bert", model="bert-base", precision="fp32",
                batch_size_per_device=4, topology=Topology(1, 1))
    return Trial(cell=cell, index=1)


def _item(run_dir: Path) -> TrialItem:
    return TrialItem(run_id=RUN_ID, run_dir=str(run_dir), suite="smoke", trial=_trial())


def _finish(rd: RunDir, status: TrialStatus, log_text: str) -> None:
    (rd.path / LOG).parent.mkdir(parents=True, exist_ok=True)
    (rd.path / LOG).write_text(log_text)
    metric = TrialMetric(value=100.0) if status == TrialStatus.OK else None
    rd.save_trial(TrialResult(trial=_trial(), status=status, metric=metric, log_paths=[LOG], nodes=["local0"]))


def test_trial_files_travel_through_the_store_only(tmp_path):
    a, b = _settings(tmp_path, "wa"), _settings(tmp_path, "wb")
    plan_rd = RunDir.at(Path(a.work_dir) / RUN_ID, RUN_ID)
    plan_rd.write("plan.json", {"run_id": RUN_ID})
    run_set = RunSet(runs=(RunEntry(run_id=RUN_ID, run_dir=str(plan_rd.path), suite="smoke"),))
    staging.leave(run_set, a)

    # the trial runs on worker B, which never saw A's disk: the item is rebased, plan.json pulled
    local = staging.enter_trial(_item(plan_rd.path), b)
    assert local.run_dir == str(Path(b.work_dir) / RUN_ID)
    assert json.loads((Path(local.run_dir) / "plan.json").read_text()) == {"run_id": RUN_ID}
    rd_b = RunDir(Path(local.run_dir), RUN_ID)
    _finish(rd_b, TrialStatus.OK, "good log\n")
    sent = staging.leave_trial(local, b)
    assert sorted(sent) == sorted([f"trials/{_trial().key}.json", LOG])

    # collect on worker A reads the trial from the staging area
    st = staging.enter(run_set, a)
    rd_a = RunDir(Path(st.runs[0].run_dir), RUN_ID)
    assert rd_a.path == plan_rd.path
    got = rd_a.reusable(_trial())
    assert got is not None and got.metric.value == 100.0
    assert (rd_a.path / LOG).read_text() == "good log\n"


def test_rerun_overwrites_nothing_valid(tmp_path):
    a, c = _settings(tmp_path, "wa"), _settings(tmp_path, "wc")
    item = _item(Path(a.work_dir) / RUN_ID)
    local = staging.enter_trial(item, a)
    _finish(RunDir(Path(local.run_dir), RUN_ID), TrialStatus.OK, "good log\n")
    staging.leave_trial(local, a)

    # a worker that did not pull (e.g. a retry racing a slow one) ends with an invalid try of the same trial
    rd_c = RunDir.at(Path(c.work_dir) / RUN_ID, RUN_ID)
    _finish(rd_c, TrialStatus.HANG, "partial log\n")
    assert staging.leave_trial(item.rebased(c.work_dir), c) == []

    # a fresh worker sees the valid result and its log, so the trial is reused, not run again
    d = _settings(tmp_path, "wd")
    fresh = staging.enter_trial(item, d)
    rd_d = RunDir(Path(fresh.run_dir), RUN_ID)
    assert rd_d.reusable(_trial()) is not None
    assert (rd_d.path / LOG).read_text() == "good log\n"

    # a whole-run-dir push (what aggregate does) from that worker does not overwrite it either
    staging.Staging(Store.from_url(a.store_url), RUN_ID).push(rd_c.path)
    e = _settings(tmp_path, "we")
    rd_e = RunDir(Path(staging.enter_trial(item, e).run_dir), RUN_ID)
    assert rd_e.reusable(_trial()) is not None and (rd_e.path / LOG).read_text() == "good log\n"


def test_invalid_staged_try_is_replaced_by_a_valid_one(tmp_path):
    a, b = _settings(tmp_path, "wa"), _settings(tmp_path, "wb")
    item = _item(Path(a.work_dir) / RUN_ID)
    la = staging.enter_trial(item, a)
    _finish(RunDir(Path(la.run_dir), RUN_ID), TrialStatus.TIMEOUT, "cut\n")
    staging.leave_trial(la, a)
    lb = staging.enter_trial(item, b)
    rd_b = RunDir(Path(lb.run_dir), RUN_ID)
    assert rd_b.reusable(_trial()) is None  # the invalid try is not reused: the retry runs
    _finish(rd_b, TrialStatus.OK, "retry log\n")
    staging.leave_trial(lb, b)
    d = _settings(tmp_path, "wd")
    rd_d = RunDir(Path(staging.enter_trial(item, d).run_dir), RUN_ID)
    assert rd_d.reusable(_trial()).status == TrialStatus.OK
    assert (rd_d.path / LOG).read_text() == "retry log\n"


def test_staging_is_private_and_keys_have_one_owner(tmp_path):
    a = _settings(tmp_path, "wa")
    store = Store.from_url(a.store_url)
    local = staging.enter_trial(_item(Path(a.work_dir) / RUN_ID), a)
    rd = RunDir(Path(local.run_dir), RUN_ID)
    _finish(rd, TrialStatus.OK, "ok\n")
    (rd.path / "publish-spool" / "local-only").mkdir(parents=True)
    (rd.path / "publish-spool" / "local-only" / "redaction-map.json").write_text("{}")
    staging.leave(RunSet(runs=(RunEntry(run_id=RUN_ID, run_dir="/elsewhere", suite="smoke"),)).rebased(a.work_dir), a)
    keys = store.backend.list_keys("")
    assert keys and all(k.startswith(f"staging/{RUN_ID}/") for k in keys)
    assert not any("publish-spool" in k for k in keys)
    assert store.list_runs() == [] and store.suites() == []
    with pytest.raises(StoreError):
        store.layout.staging_key("../etc", "x")
    with pytest.raises(StoreError):
        store.layout.staging_key(RUN_ID, "../x")


def test_a_cleared_dag_run_planned_on_another_worker_keeps_its_run_ids(tmp_path):
    from dlperf_tasks.engine.rundir import group_run_record, read_json, write_json

    a, b = _settings(tmp_path, "wa"), _settings(tmp_path, "wb")
    assert staging.pull_group_record(b, "smoke", "manual__1") is False  # first try: nothing staged
    write_json(group_run_record(a.work_dir, "smoke", "manual__1"), {"runs": {"smoke": RUN_ID}})
    assert staging.push_group_record(a, "smoke", "manual__1")
    assert staging.pull_group_record(b, "smoke", "manual__1")
    assert read_json(group_run_record(b.work_dir, "smoke", "manual__1")) == {"runs": {"smoke": RUN_ID}}
    assert staging.pull_group_record(b, "smoke", "manual__2") is False
    assert Store.from_url(a.store_url).list_runs() == []
