"""The engine's run-directory bookkeeping (no cluster, no scheduler): a scheduled run keeps
its run ids, a valid trial record in the run directory is reused, an invalid / foreign /
log-less one is not, collect counts each trial once, and one trial record format round-trips."""

from __future__ import annotations

import logging
from pathlib import Path

from dlperf_tasks.engine import finish, setup, trials
from dlperf_tasks.engine.rundir import RunDir, is_run_id
from dlperf_tasks.core.model import TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.report.result_json import trial_from_record, trial_record
from dlperf_tasks.core.settings import Settings

PARAMS = {"topologies": ["1n1g"], "trials": 2, "warmup_iters": 1, "measure_iters": 2}


def _cfg(tmp_path):
    return Settings(work_dir=str(tmp_path / "work"), store_url=f"file://{tmp_path / 'store'}")


def test_same_group_run_keeps_its_run_ids_another_gets_new_ones(tmp_path):
    cfg = _cfg(tmp_path)
    a = setup.plan_runs("smoke", ["smoke"], PARAMS, cfg, group_run_id="manual__2026-01-01T00:00:00+00:00")
    again = setup.plan_runs("smoke", ["smoke"], PARAMS, cfg, group_run_id="manual__2026-01-01T00:00:00+00:00")
    other = setup.plan_runs("smoke", ["smoke"], PARAMS, cfg, group_run_id="manual__2026-01-02T00:00:00+00:00")
    assert [r.run_id for r in again.runs] == [r.run_id for r in a.runs]
    assert [r.started_at for r in again.runs] == [r.started_at for r in a.runs]
    assert not a.runs[0].rerun and again.runs[0].rerun
    assert other.runs[0].run_id != a.runs[0].run_id and not other.runs[0].rerun
    assert [i.key for i in again.trials] == [i.key for i in a.trials]  # deterministic trial keys
    assert is_run_id(a.runs[0].run_id) and a.runs[0].run_id.startswith("smoke-")


def _result(item, status=TrialStatus.OK, with_log=True, trial=None, run_dir=None):
    t = trial or item.trial
    log = f"logs/{t.key}.log"
    if with_log:
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (run_dir / log).write_text("x\n")
    return TrialResult(t, status, "", TrialMetric(12.5) if status == TrialStatus.OK else None, log_paths=[log],
                       nodes=["local0"], exit_codes={"local0": 0}, started_at=1.0, finished_at=2.0)


def test_only_a_valid_record_of_the_same_trial_with_its_logs_is_reused(tmp_path):
    out = setup.plan_runs("smoke", ["smoke"], PARAMS, _cfg(tmp_path), group_run_id="r1")
    item, other = out.trials[0], out.trials[1]
    rd = RunDir(Path(item.run_dir), item.run_id)
    trial = item.trial
    assert rd.reusable(trial) is None  # missing
    rd.save_trial(_result(item, TrialStatus.INVALID_LOG, run_dir=rd.path))
    assert rd.reusable(trial) is None  # invalid
    foreign = _result(item, trial=other.trial, run_dir=rd.path)
    rd.trial_file(trial).write_text(__import__("json").dumps(trial_record(foreign)))
    assert rd.reusable(trial) is None  # another trial's record under this key
    good = _result(item, run_dir=rd.path)
    rd.save_trial(good)
    assert rd.reusable(trial).metric.value == 12.5
    (rd.path / good.log_paths[0]).unlink()
    assert rd.reusable(trial) is None  # its log is gone: run it again
    rd.trial_file(trial).write_text("{not json")
    assert rd.reusable(trial) is None
    rd.save_trial(_result(item, run_dir=rd.path))  # run_item returns the reused record, runs nothing
    got = trials.run_item(item, _cfg(tmp_path))
    assert got["reused"] is True and got["trial"]["started_at"] == 1.0
    assert trial_from_record(got).metric.value == 12.5


def test_collect_counts_each_trial_once(tmp_path):
    out = setup.plan_runs("smoke", ["smoke"], PARAMS, _cfg(tmp_path), group_run_id="r2")
    run_dir = Path(out.runs[0].run_dir)
    rd = RunDir(run_dir, out.runs[0].run_id)
    docs = [rd.save_trial(_result(i, run_dir=run_dir)) for i in out.trials]
    collected = finish.collect_runs(out, [docs[0], docs[1], docs[0], None])
    (got,) = collected["trials"].values()
    assert len(got) == 2
    assert collected["missing_logs"] == {out.runs[0].run_id: []}


def test_a_dry_run_plans_commands_and_publishes_nothing(tmp_path):
    cfg = _cfg(tmp_path)
    out = setup.plan_runs("smoke", ["smoke"], {**PARAMS, "dry_run": True}, cfg, group_run_id="r3")
    recs = [trials.run_item(i, cfg) for i in out.trials]
    assert all(r["trial"]["status"] == "NOT_RUN" and r["commands"] for r in recs)
    assert "train_bert" in recs[0]["commands"][0]
    summaries = finish.aggregate_runs(out, finish.collect_runs(out, recs), cfg)
    assert finish.publish(out, summaries, cfg, group="smoke", dry_run_commands=recs[0]["commands"]) == []
    assert not (tmp_path / "store").exists()


def test_a_failing_regression_check_is_logged_and_does_not_fail_publish(tmp_path, caplog):
    """The store is real (file backend); the run id is not in it, so check_run itself fails."""
    from dlperf_tasks.store import Store

    store = Store.from_url(f"file://{tmp_path / 'store'}")
    with caplog.at_level(logging.ERROR, logger="dlperf.engine"):
        got = finish.regression_check(store, "smoke-20260101T000000-abcdef", _cfg(tmp_path))
    assert "error" in got and got["error"].startswith("NotFoundError: run "), got  # the kind names the failure
    assert "regression check of smoke-20260101T000000-abcdef failed (the run is published)" in caplog.text
