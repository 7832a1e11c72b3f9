"""Telemetry through the one engine on the simulated cluster, CLI path (``run_sweep``) and DAG path
(``dag.test()``): real sshd nodes, dockerd, registry and the stand-in trainer image. Only the GPUs
are simulated: every node runs the STAND-IN nvidia-smi (docker/standin/rootfs/usr/local/bin/nvidia-smi,
the real tool's CSV/-q formats) with the memory values this test writes into the node's scenario
file; the stand-in trainer ramps its speed up (``DLPERF_STANDIN_RAMP_ITERS``) so the cell is not steady."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
STANDIN_SMI = str(ROOT / "docker" / "standin" / "rootfs" / "usr" / "local" / "bin" / "nvidia-smi")
MEM = 14362


@contextlib.contextmanager
def gpu_scenario(cluster, monkeypatch, scenario: Callable[[Path], dict], **telemetry) -> Iterator[None]:
    """Every node's stand-in GPUs play ``scenario(node workdir)`` (the stand-in nvidia-smi's scenario
    file) and the engine's sampler runs the stand-in nvidia-smi every 0.5 s (``telemetry``: more
    sampler settings); the scenario files are removed afterwards."""
    paths = []
    for n in cluster.nodes:
        wd = Path(n.workdir)
        wd.mkdir(parents=True, exist_ok=True)
        p = wd / "standin-gpus.json"
        p.write_text(json.dumps(scenario(wd)))
        paths.append(p)
    monkeypatch.setenv("DLPERF_TELEMETRY", json.dumps({"interval_s": 0.5, "nvidia_smi": STANDIN_SMI, **telemetry}))
    try:
        yield
    finally:
        for p in paths:
            p.unlink(missing_ok=True)


@pytest.fixture
def standin_gpus(sim_cluster, monkeypatch):
    """Every node: 8 stand-in GPUs at MEM MiB; the engine's sampler runs the stand-in nvidia-smi."""
    with gpu_scenario(sim_cluster, monkeypatch,
                      lambda _: {"count": 8, "default": {"memory_used": MEM, "util": 93, "power": 301.0}}):
        yield sim_cluster


def sweep(suite, trials: int, cluster, tmp_path: Path, settings=None):
    """The CLI path: ``run_sweep`` of suite's fp32/batch-32 cells with ``trials`` trials each."""
    from dlperf_tasks.engine.sweep import SweepOptions, run_sweep

    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": trials})
    return run_sweep(suite, p, Cluster.from_yaml(cluster.yaml_path), tmp_path / "out",
                     SweepOptions(progress=None, lease_wait_s=400, settings=settings))


def ramp_suite(tmp_path: Path, env: dict | None = None):
    data = yaml.safe_load((ROOT / "dlperf_tasks/catalog/suites/pytorch-bert.yaml").read_text())
    data["id"] = "pytorch-bert-h7tele"
    data["env"] = env or {"DLPERF_STANDIN_TIME_SCALE": "0.02", "DLPERF_STANDIN_SPEED_1N1G": "120.5",
                          "DLPERF_STANDIN_RAMP_ITERS": "25"}
    data["launcher"]["workdir"] = "/workspace/examples/bert"  # where the stand-in image keeps DLE's BERT
    data["gradient_accumulation_steps"] = [1]
    data.pop("exclude", None)
    data["window"] = {"warmup": 2, "measure": 40}
    data["topologies"] = ["1n1g"]
    data["timeout_s"], data["hang_timeout_s"] = 120, 60
    p = tmp_path / f"{data['id']}.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_suite(str(p))


def check_outputs(result: dict, out: Path) -> None:
    cell = result["cells"][0]
    assert cell["gpu_memory_mib"] == MEM, cell.get("trials")
    t = cell["trials"][0]["telemetry"]
    node = next(iter(t["nodes"].values()))
    assert node["gpu"] == "present" and node["gpus"]["0"]["peak_memory_mib"] == MEM
    assert list(node["gpus"]) == ["0"]  # a 1n1g trial samples its one GPU
    st = cell["steady_state"]
    assert not st["steady"] and st["suggested_warmup"] is not None and st["suggested_warmup"] > 2
    md = (out / "report.md").read_text()
    assert "## GPU telemetry" in md and f"{cell['cell_id']} | {MEM} |" in md
    assert f"a warm-up of {st['suggested_warmup']} iterations would have been steady" in md
    assert list((out / "plots").glob("telemetry_*.png"))


def test_cli_sweep_carries_telemetry(standin_gpus, sim_cluster_env, tmp_path):
    res = sweep(ramp_suite(tmp_path), 2, sim_cluster_env, tmp_path)
    assert [r.status.value for r in res.all] == ["OK", "OK"], [(r.trial.id, r.reason) for r in res.all]
    check_outputs(res.result, res.out_dir)


@pytest.mark.airflow
def test_dag_run_carries_telemetry(standin_gpus, airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog, state

    cat = site_catalog(tmp_path / "catalog", "pytorch-bert", {"1n1g": 101.5}, window=(2, 40),
                       env={"DLPERF_STANDIN_RAMP_ITERS": "25"})
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(cat))
    cfg = cluster_settings(sim_cluster_env.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work")
    dr = build_pytorch_dag(cfg).test(run_conf={"topologies": ["1n1g"], "trials": 2, "precisions": ["fp32"],
                                               "batch_sizes": [32]})
    assert state(dr) == "success"
    (res_path,) = [p for p in (tmp_path / "work").rglob("result.json") if "publish-spool" not in str(p)]
    check_outputs(json.loads(res_path.read_text()), res_path.parent)


def test_cli_sweep_throttled_and_xid_trials_marked(sim_cluster_env, tmp_path, monkeypatch):
    """Every node's stand-in GPUs run thermally throttled and log an XID 79 half a second into each
    trial: the engine marks each trial throttled (flag) and invalid for the XID (default policy)."""
    def scenario(wd: Path) -> dict:
        (wd / "standin-kmsg").write_text("")
        return {"count": 8, "default": {"memory_used": 9000, "util": 90},
                "episodes": [{"gpu": 0, "start": 0, "end": 3600, "reasons": 0x40, "sm": 700}],
                "xids": [{"gpu": 0, "at": 0.5, "code": 79}], "kernel_log": str(wd / "standin-kmsg")}

    with gpu_scenario(sim_cluster_env, monkeypatch, scenario,
                      kernel_log_cmd='cat "$DLPERF_NODE_WORKDIR/standin-kmsg" 2>/dev/null'):
        res = sweep(ramp_suite(tmp_path), 2, sim_cluster_env, tmp_path)
    cell = res.result["cells"][0]
    assert cell["n_valid"] == 0 and cell["telemetry_labels"] == ["XID", "throttled"]
    for t in cell["trials"]:
        assert t["status"] == "INVALID_LOG" and "GPU telemetry:" in t["reason"] and "new XID 79 on GPU 0" in t["reason"]
    md = (res.out_dir / "report.md").read_text()
    assert md.count("[XID, invalid]") == 2 and md.count("[throttled]") == 2 and "hw_thermal_slowdown" in md


NAN_ENV = {"DLPERF_STANDIN_TIME_SCALE": "0.02", "DLPERF_STANDIN_SPEED_1N1G": "120.5", "DLPERF_STANDIN_LOSS_SCALE": "nan"}


def check_nan_invalid(result: dict) -> None:
    """The stand-in printed nan for every loss (a diverged run at full speed): the trial is invalid."""
    (cell,) = result["cells"]
    assert cell["n_valid"] == 0 and cell["median_speed"] is None
    for t in cell["trials"]:
        assert t["status"] == "INVALID_LOG" and not t["valid"], t
        assert "non-finite loss" in t["reason"] and "= nan" in t["reason"], t["reason"]
        assert t["value"] is not None  # fast: the speed was measured, and still not counted
    assert cell["final_losses"] == []


def test_cli_sweep_nan_loss_trial_invalid(sim_cluster_env, tmp_path):
    res = sweep(ramp_suite(tmp_path, NAN_ENV), 1, sim_cluster_env, tmp_path)
    check_nan_invalid(res.result)
    assert "non-finite loss" in (res.out_dir / "report.md").read_text()


@pytest.mark.airflow
def test_dag_run_nan_loss_trial_invalid(airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog

    cat = site_catalog(tmp_path / "catalog", "pytorch-bert", {"1n1g": 120.5}, window=(2, 20),
                       env={"DLPERF_STANDIN_LOSS_SCALE": "nan"})
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(cat))
    cfg = cluster_settings(sim_cluster_env.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work")
    build_pytorch_dag(cfg).test(run_conf={"topologies": ["1n1g"], "trials": 1, "precisions": ["fp32"],
                                          "batch_sizes": [32]})
    (res_path,) = [p for p in (tmp_path / "work").rglob("result.json") if "publish-spool" not in str(p)]
    check_nan_invalid(json.loads(res_path.read_text()))


def seed_loss_history(store, suite_id: str, cell, workdir: Path, losses=(10.1, 10.12, 10.08)) -> None:
    """Publish one earlier run (January 2026) per value of ``losses``: ``cell`` with 2 valid trials
    whose final loss is that value (what the outputs step records and the index keeps), trained
    as long as the cell's window (only such runs are loss history)."""
    from dlperf_tasks.core.model import MetricKind, Trial, TrialMetric, TrialResult, TrialStatus
    from dlperf_tasks.report.result_json import build_result, write_result
    from dlperf_tasks.measure.stats import aggregate

    for i, loss in enumerate(losses):
        rs = [TrialResult(trial=Trial(cell, k), status=TrialStatus.OK, nodes=["node1"],
                          metric=TrialMetric(value=120.5, kind=MetricKind.THROUGHPUT, details={"final_loss": loss}))
              for k in (1, 2)]
        res = build_result(aggregate(rs), {"run_id": f"{suite_id}-2026010{i + 1}T000000-0000a{i}", "suite": suite_id,
                                           "started_at": f"2026-01-0{i + 1}T00:00:00+00:00"})
        res["cells"][0]["final_losses"] = [loss, loss]
        res["run"]["window"] = {"warmup": cell.window.warmup, "measure": cell.window.measure}
        rd = workdir / res["run"]["run_id"]
        write_result(res, rd / "result.json")
        store.publish(rd)


LOSS_ENV = {"DLPERF_STANDIN_TIME_SCALE": "0.02", "DLPERF_STANDIN_SPEED_1N1G": "120.5", "DLPERF_STANDIN_LOSS_SCALE": "1.5"}


def test_cli_sweep_final_loss_off_history_is_fast_but_wrong(sim_cluster_env, tmp_path):
    """Three earlier runs of the cell ended near loss 10.1; this one 1.5 x higher at full speed: the
    outputs step flags the cell "fast but wrong?" (result.json, report.md) and, once published,
    the regression check has a finding of kind loss."""
    from dlperf_tasks.history.check import check_run
    from dlperf_tasks.core.settings import Settings
    from dlperf_tasks.store import Store

    suite = ramp_suite(tmp_path, LOSS_ENV)
    cell = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 2}).trials[0].trial.cell
    store = Store.from_url(f"file://{tmp_path / 'store' / 'data'}")
    seed_loss_history(store, suite.id, cell, tmp_path / "seed")
    settings = Settings.load(store_url=store.url(), cluster=str(sim_cluster_env.yaml_path))
    res = sweep(suite, 2, sim_cluster_env, tmp_path, settings)
    (cell,) = res.result["cells"]
    assert cell["n_valid"] == 2 and len(set(cell["final_losses"])) == 1, cell["final_losses"]
    lc = cell["loss_check"]
    assert lc["status"] == "fast but wrong?" and lc["history_runs"] == 3 and lc["final_loss"] > lc["band"][1]
    assert f"{cell['cell_id']} [fast but wrong?]: fast but wrong? final loss" in (res.out_dir / "report.md").read_text()
    store.publish(res.out_dir)
    rep = check_run(store, res.result["run"]["run_id"], log=None, notify_target="")
    assert [(f.kind, f.status, f.cell_id) for f in rep.findings] == [("loss", "fast but wrong?", cell["cell_id"])]


def test_cli_sweep_cpu_bound_trial_labelled(sim_cluster_env, tmp_path, monkeypatch):
    """The stand-in trainer spins two busy processes (the VM's two cores) while the stand-in GPUs
    report 0% utilisation: the engine labels the trial CPU-bound (a flag: the trial stays valid)."""
    suite = ramp_suite(tmp_path, {"DLPERF_STANDIN_TIME_SCALE": "1.0", "DLPERF_STANDIN_SPEED_1N1G": "120.5",
                                  "DLPERF_STANDIN_BURN_CORES": "2"})
    with gpu_scenario(sim_cluster_env, monkeypatch,
                      lambda _: {"count": 8, "default": {"memory_used": 2048, "util": 0, "power": 60.0}}):
        res = sweep(suite, 1, sim_cluster_env, tmp_path)
    (cell,) = res.result["cells"]
    (t,) = cell["trials"]
    assert t["status"] == "OK" and "CPU-bound" in cell["telemetry_labels"], (t["reason"], cell["telemetry_labels"])
    (flag,) = [f for f in t["telemetry"]["flags"] if f["kind"] == "cpu_bound"]
    assert flag["action"] == "flag" and "while GPU utilisation averaged 0%" in flag["detail"]
    md = (res.out_dir / "report.md").read_text()
    assert "[CPU-bound]" in md and "while GPU utilisation averaged 0%" in md


@pytest.mark.airflow
def test_dag_run_final_loss_off_history_is_a_loss_finding(airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    """The DAG path: three earlier runs of the cell in the store ended near loss 10.1, this DAG run's
    trials end 1.5 x higher: the publish step's regression check records a finding of kind loss
    ("fast but wrong?") in the run's annotations and the index badge."""
    from dlperf_tasks.catalog.loader import load_suite as load
    from dlperf_tasks.store import Store
    from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog, state

    cat = site_catalog(tmp_path / "catalog", "pytorch-bert", {"1n1g": 120.5}, window=(2, 40),
                       env={"DLPERF_STANDIN_LOSS_SCALE": "1.5"})
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(cat))
    conf = {"topologies": ["1n1g"], "trials": 2, "precisions": ["fp32"], "batch_sizes": [32]}
    suite = load("pytorch-bert")
    (cell,) = {pt.trial.cell.id: pt.trial.cell
               for pt in plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 2}).trials}.values()
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    seed_loss_history(store, suite.id, cell, tmp_path / "seed")
    cfg = cluster_settings(sim_cluster_env.yaml_path, store.url(), tmp_path / "work")
    dr = build_pytorch_dag(cfg).test(run_conf=conf)
    assert state(dr) == "success"
    last = json.loads((tmp_path / "work" / "last-pytorch.json").read_text())
    (pub,) = last["published"]
    assert pub["regressions"]["cells"] == [f"loss:{cell.id}"], pub["regressions"]
    doc = store.read_annotation(pub["run_id"], "regressions")
    (f,) = doc["findings"]
    assert (f["kind"], f["status"]) == ("loss", "fast but wrong?") and "outside the band" in f["note"]
    # the aggregate step read the same history: result.json and report.md say it too
    out = Path(pub["run_dir"])
    (c,) = json.loads((out / "result.json").read_text())["cells"]
    assert c["loss_check"]["status"] == "fast but wrong?" and c["loss_check"]["history_runs"] == 3
    assert f"{cell.id} [fast but wrong?]: fast but wrong? final loss" in (out / "report.md").read_text()
