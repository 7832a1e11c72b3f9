"""The dlperf_smoke DAG end to end through real Airflow (``dag.test()``, SQLite metadata DB):
plan -> prepare -> real PyTorch BERT trials with torchrun (1n1g and 1n2g, CPU/gloo, local
cluster) -> collect -> aggregate -> report -> publish (local file store) -> cleanup.
Nothing is mocked."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


@pytest.fixture(scope="module")
def smoke_dag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.dags["dlperf_smoke"]


def _task_states(dr):
    return {(ti.task_id, ti.map_index): str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}


def test_smoke_dag_runs_real_training_and_publishes(smoke_dag, dlperf_dirs):
    conf = {"trials": 2, "warmup_iters": 2, "measure_iters": 6, "topologies": ["1n1g", "1n2g"]}
    dr = smoke_dag.test(run_conf=conf)
    states = _task_states(dr)
    assert str(getattr(dr.state, "value", dr.state)) == "success", states
    assert sum(1 for (t, _), s in states.items() if t == "trial" and s == "success") == 4
    assert states[("cleanup", -1)] == "success"

    last = json.loads((dlperf_dirs["work"] / "last-smoke.json").read_text())
    (pub,) = last["published"]
    dest = Path(pub["location"].removeprefix("file://"))
    assert dest.is_relative_to(dlperf_dirs["store"])
    result = json.loads((dest / "result.json").read_text())
    assert result["schema_version"] == 1
    assert result["run"]["suite"] == "smoke" and result["run"]["dag_run_id"] == dr.run_id
    assert result["run"]["env"]["torch"].startswith("2.13")
    cells = {c["topology"]: c for c in result["cells"]}
    assert set(cells) == {"1n1g", "1n2g"}
    for topo, c in cells.items():
        assert c["n_valid"] == 2 and c["n_invalid"] == 0, c["trials"]
        assert c["median_speed"] > 0 and c["unit"] == "samples/s"
        for t in c["trials"]:
            assert t["status"] == "OK" and len(t["samples"]) == 8  # every iteration recorded
            assert (dest / t["log"]).exists()
    assert cells["1n1g"]["speedup"] == 1.0 and cells["1n1g"]["speedup_state"] == "baseline"
    assert cells["1n2g"]["speedup_state"] == "ok"
    assert cells["1n2g"]["speedup"] == round(cells["1n2g"]["median_speed"] / cells["1n1g"]["median_speed"], 2)
    assert result["dlperf"]["bz8"]  # the seeds' shape
    md = (dest / "report.md").read_text()
    assert "bert-tiny FP32 batch_size = 8" in md and "all 4 trials passed the validity gate" in md
    plots = sorted(p.name for p in (dest / "plots").glob("*.png"))
    assert plots and sorted(Path(p).name for p in pub["plots"]) == plots, (plots, pub["plots"])
    assert all((dest / "plots" / p).read_bytes().startswith(b"\x89PNG") for p in plots)
    # what `make run` prints at the end: the table and where result, report, plots and logs are
    import contextlib
    import io

    from dlperf_tasks.airflow import embedded

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert embedded.show("dlperf_smoke") == 0
    assert f"{pub['location']}/plots/ (" in out.getvalue() and all(p in out.getvalue() for p in plots), out.getvalue()
    # the regression check ran after publish and its outcome is recorded (a first run: no history)
    assert "error" not in pub["regressions"] and pub["regressions"]["findings"] == 0, pub["regressions"]
    manifest = json.loads((dest / "manifest.json").read_text())
    listed = {o["path"] for o in manifest.get("objects", manifest.get("files", []))} or set(json.dumps(manifest))
    assert "result.json" in str(listed)
    # the publish task recorded an asset event on dlperf://results/smoke
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as s:
        events = (s.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.uri == "dlperf://results/smoke").all())
        assert any(pub["run_id"] in json.dumps(e.extra) for e in events)
    # the run's note links to its results page (one click from the grid)
    from airflow.models.dagrun import DagRun

    with create_session() as s:
        note = s.query(DagRun).filter(DagRun.dag_id == "dlperf_smoke", DagRun.run_id == dr.run_id).one().note
    assert note and f"/dlperf/runs/{pub['run_id']}" in note and "**smoke**" in note, note
    # prepare recorded this machine's names and addresses; none of them reaches the published logs
    ident = json.loads((Path(pub["run_dir"]) / "node-identity.json").read_text())["local0"]
    assert ident["os_hostname"]
    for t in cells["1n1g"]["trials"]:
        import re

        assert not re.search(rf"(?<![\w.-]){re.escape(ident['os_hostname'])}(?![\w-])", (dest / t["log"]).read_text())


@pytest.mark.parametrize("conf, field", [
    ({"topologies": ["1n8g; touch /tmp/dlperf-pwned"]}, "topologies"),
    ({"topologies": ["3n2g"]}, "topologies"),  # well-formed, but the local cluster has 1 node
    ({"image_tag": "$(reboot)"}, "image_tag"),
    ({"trials": 99}, "trials"),
])
def test_bad_conf_fails_before_any_trial(smoke_dag, dlperf_dirs, conf, field):
    before = set(dlperf_dirs["work"].glob("smoke-*")) if dlperf_dirs["work"].exists() else set()
    try:
        dr = smoke_dag.test(run_conf=conf)
    except Exception as exc:  # Airflow's own Param validation refused the conf
        assert field.rstrip("s") in str(exc), exc
        return
    states = _task_states(dr)
    assert str(getattr(dr.state, "value", dr.state)) == "failed", states
    assert states[("plan", -1)] == "failed"
    assert not any(t == "trial" and s == "success" for (t, _), s in states.items())
    after = set(dlperf_dirs["work"].glob("smoke-*")) if dlperf_dirs["work"].exists() else set()
    assert after == before, "a rejected run must not create a run directory"
    assert not Path("/tmp/dlperf-pwned").exists()
