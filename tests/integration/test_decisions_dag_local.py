"""Adaptive trials and node health in the DAG path on the local runtime (real PyTorch smoke trials on this machine,
``dag.test()``, file store): adaptive trials with a wide CI width stop a cell after the minimum,
the later mapped trials record themselves SKIPPED (not needed) and the report says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf_tasks.airflow.settings import DlperfSettings

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def test_smoke_dag_adaptive_stops_after_the_minimum(airflow_db, tmp_path, monkeypatch):
    from dlperf_tasks.airflow.dag_factory import build_dag
    from dlperf_tasks.catalog.loader import load_suite

    cfg = DlperfSettings(cluster="local", store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "work"),
                         schedules={"smoke": None})
    dag = build_dag("smoke", [load_suite("smoke")], cfg)
    # the widest CI width the form allows (50 %: the range of three values over their median) and
    # 40 measured iterations (about 3 s): on a busy 2-core CI machine, 6 iterations (0.5 s) of three
    # trials once spread over 66 % of their median (71 / 83 / 126 samples/s), and the cell ran all 5;
    # the stop rule, not the machine's noise, is under test
    dr = dag.test(run_conf={"trials": 5, "warmup_iters": 4, "measure_iters": 40, "topologies": ["1n1g"],
                            "adaptive": 0.5})
    states = {(ti.task_id, ti.map_index): str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}
    assert str(getattr(dr.state, "value", dr.state)) == "success", states
    assert sorted(s for (t, _), s in states.items() if t == "trial") == ["success"] * 3
    assert sorted(s for (t, _), s in states.items() if t == "trial_more") == ["success"] * 2  # after the first 3
    (pub,) = json.loads((tmp_path / "work" / "last-smoke.json").read_text())["published"]
    result = json.loads(Path(pub["run_dir"], "result.json").read_text())
    (cell,) = result["cells"]
    ada = result["run"]["adaptive"]
    assert (cell["n_valid"], cell["n_invalid"]) == (3, 0), ([(t["status"], t["reason"]) for t in cell["trials"]], ada)
    assert (ada["trials_used"], ada["trials_max"], ada["cells"][0]["stopped"]) == (3, 5, "converged"), ada
    recs = [json.loads(p.read_text())["trial"] for p in Path(pub["run_dir"], "trials").glob("*.json")]
    skipped = sorted(t["index"] for t in recs if t["status"] == "SKIPPED")
    assert skipped == [4, 5] and not [t for t in recs if t["status"] == "NOT_RUN"]
    why = ada["cells"][0]["reason"]  # the rule's reason the cell stopped; the skips name it
    assert [t["reason"] for t in sorted(recs, key=lambda t: t["index"]) if t["status"] == "SKIPPED"] == \
        [why, why]
    published = json.loads((Path(pub["location"].removeprefix("file://")) / "result.json").read_text())
    assert published["run"]["adaptive"] == ada and published["run"]["node_health"]["suspects"] == []
    report = (Path(pub["location"].removeprefix("file://")) / "report.md").read_text()
    assert "## Adaptive trials" in report and "Trials used: 3 of 5 (40.0 % saved)" in report
    assert "## Node health" in report
    assert states[("confirm_plan", -1)] == "success" and ("confirm_trigger", -1) in states  # nothing to confirm
