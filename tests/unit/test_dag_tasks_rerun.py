"""Re-run bookkeeping of the Airflow tasks (pure functions of dlperf_tasks.airflow.tasks, no
Airflow, no cluster): a DAG run keeps its run ids, a valid trial result in the run directory is
reused, an invalid / foreign / log-less one is not, and collect counts each trial once."""

from __future__ import annotations

import json

from dlperf_tasks.airflow import tasks
from dlperf_tasks.airflow.settings import DlperfSettings

CONF = {"topologies": ["1n1g"], "trials": 2, "warmup_iters": 1, "measure_iters": 2}


def _cfg(tmp_path):
    return DlperfSettings(work_dir=str(tmp_path / "work"), store_url=f"file://{tmp_path / 'store'}")


def test_same_dag_run_keeps_its_run_ids_another_gets_new_ones(tmp_path):
    cfg = _cfg(tmp_path)
    a = tasks.plan_run("smoke", ["smoke"], CONF, cfg, dag_run_id="manual__2026-01-01T00:00:00+00:00")
    again = tasks.plan_run("smoke", ["smoke"], CONF, cfg, dag_run_id="manual__2026-01-01T00:00:00+00:00")
    other = tasks.plan_run("smoke", ["smoke"], CONF, cfg, dag_run_id="manual__2026-01-02T00:00:00+00:00")
    assert [r["run_id"] for r in again["runs"]] == [r["run_id"] for r in a["runs"]]
    assert [r["started_at"] for r in again["runs"]] == [r["started_at"] for r in a["runs"]]
    assert not a["runs"][0]["rerun"] and again["runs"][0]["rerun"]
    assert other["runs"][0]["run_id"] != a["runs"][0]["run_id"] and not other["runs"][0]["rerun"]
    assert [i["key"] for i in again["trials"]] == [i["key"] for i in a["trials"]]  # deterministic trial keys


def _write_trial(run_dir, item, status="OK", with_log=True, trial=None):
    log = f"logs/{item['key']}.log"
    if with_log:
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (run_dir / log).write_text("x\n")
    doc = {"trial": trial or item["trial"], "status": status, "reason": "", "metric": None, "samples": [],
           "log_paths": [log], "nodes": ["local0"], "exit_codes": {"local0": 0}, "started_at": 1.0,
           "finished_at": 2.0}
    tasks._write_json(tasks.trial_file(run_dir, item["key"]), doc)
    return doc


def test_only_a_valid_result_of_the_same_trial_with_its_logs_is_reused(tmp_path):
    out = tasks.plan_run("smoke", ["smoke"], CONF, _cfg(tmp_path), dag_run_id="r1")
    item, other = out["trials"][0], out["trials"][1]
    run_dir = tmp_path / "work" / item["run_id"]
    assert tasks.reusable_result(run_dir, item) is None  # missing
    _write_trial(run_dir, item, status="INVALID_LOG")
    assert tasks.reusable_result(run_dir, item) is None  # invalid
    _write_trial(run_dir, item, trial=other["trial"])
    assert tasks.reusable_result(run_dir, item) is None  # another trial's result under this key
    doc = _write_trial(run_dir, item)
    assert tasks.reusable_result(run_dir, item) == json.loads(json.dumps(doc))
    (run_dir / doc["log_paths"][0]).unlink()
    assert tasks.reusable_result(run_dir, item) is None  # its log is gone: run it again
    tasks.trial_file(run_dir, item["key"]).write_text("{not json")
    assert tasks.reusable_result(run_dir, item) is None
    # run_trial returns the reused result without running anything
    doc = _write_trial(run_dir, item)
    got = tasks.run_trial(item, _cfg(tmp_path))
    assert got["reused"] is True and got["started_at"] == doc["started_at"]


def test_collect_counts_each_trial_once(tmp_path):
    out = tasks.plan_run("smoke", ["smoke"], CONF, _cfg(tmp_path), dag_run_id="r2")
    run_dir = tmp_path / "work" / out["runs"][0]["run_id"]
    docs = [_write_trial(run_dir, i) for i in out["trials"]]
    collected = tasks.collect(out, [docs[0], docs[1], docs[0], None], _cfg(tmp_path))
    (results,) = collected["results"].values()
    assert len(results) == 2
    assert collected["missing_logs"] == {out["runs"][0]["run_id"]: []}


def test_a_failing_regression_check_is_logged_and_does_not_fail_publish(tmp_path, caplog):
    """The store is real (file backend); the run id is not in it, so check_run itself fails."""
    import logging

    from dlperf_tasks.store import Store

    store = Store.from_url(f"file://{tmp_path / 'store'}")
    log = logging.getLogger("dlperf.test.publish")
    with caplog.at_level(logging.ERROR, logger="dlperf.test.publish"):
        got = tasks.regression_check(store, "smoke-20260101T000000-abcdef", log)
    assert "error" in got and "StoreError" in got["error"], got
    assert "regression check of smoke-20260101T000000-abcdef failed (the run is published)" in caplog.text
