"""An LLM suite end to end on the simulated cluster: the ``dlperf_torchtitan`` DAG through real
Airflow (``dag.test()``), real sshd nodes, dockerd and the registry with auth, publishing to a
real SeaweedFS S3 server (the session fixtures the other DAG tests share).

Only the GPUs are simulated: the registry serves the stand-in image under the suite's NGC name
(127.0.0.1:5000/nvidia/pytorch:25.10-py3 for nvcr.io/nvidia/pytorch:25.10-py3), the stand-in
torchtitan prints its real log line at the tokens/s the site catalog override sets, and every
node's stand-in nvidia-smi names its GPUs "NVIDIA H100 80GB HBM3" (the real tool's CSV format).
The override pins the image's digest as the registry serves it, as an operator pins NGC's.

Checked: result.json (published and local), report.md, the results page and an export carry
tokens/s per GPU, TFLOP/s per GPU in both attention conventions and the MFU against the H100
SXM's dense BF16 peak (the GPU model from the nodes' environment capture); each trial records
the GPU model and image digest its node ran with, the run the digest its plan pinned. A node
holding another image than the pinned digest refuses the trial before anything starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastapi import Header
from fastapi.testclient import TestClient

from dlperf_tasks.history.export_formats import to_bencher, to_openmetrics
from dlperf_tasks.measure.llm_metrics import flops_per_token
from dlperf_tasks.store.store import Store
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.app import create_app
from tests.integration.dag_cluster_helpers import ROOT, cluster_settings, state, task_states
from tests.integration.test_telemetry_engine import gpu_scenario

pytestmark = [pytest.mark.cluster, pytest.mark.s3, pytest.mark.airflow, pytest.mark.slow]

SUITE = "llama31-8b-torchtitan"
TAG = "pytorch:25.10-py3"
TPS = 7000.0
H100 = "NVIDIA H100 80GB HBM3"


def llm_catalog(dir_: Path, digest: str, suite: str = SUITE, case: str = "fsdp8", precision: str = "bf16",
                tflops: float = 380.0) -> Path:
    """A site override of a built-in suite: one 1n8g layout, one precision, one trial of 2 + 4 steps,
    the stand-in's speed (and the TFLOP/s/GPU its log prints), and the image digest pinned."""
    data = yaml.safe_load((ROOT / f"dlperf_tasks/catalog/suites/{suite}.yaml").read_text())
    data["env"] = {**data.get("env", {}), "DLPERF_STANDIN_TIME_SCALE": "0.02",
                   "DLPERF_STANDIN_TPS_PER_GPU": str(TPS), "DLPERF_STANDIN_TFLOPS": str(tflops)}
    data["container"]["digest"] = digest
    data["layouts"] = [lay for lay in data["layouts"] if lay["case"] == case]
    data["precisions"] = [precision]
    data["window"], data["trials"] = {"warmup": 2, "measure": 4}, 1
    data["timeout_s"], data["hang_timeout_s"] = 120, 60
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / f"{suite}.yaml").write_text(yaml.safe_dump(data))
    return dir_


def _page(store_url: str, run_id: str) -> str:
    def authorize(x_user: str | None = Header(default=None)):
        return Viewer(name="alice", suites=frozenset({SUITE}), other_suites=False, known=frozenset({SUITE}))

    client = TestClient(create_app(lambda: Store.from_url(store_url), authorize=authorize))
    r = client.get(f"/runs/{run_id}", headers={"accept": "text/html", "x-user": "alice"})
    assert r.status_code == 200, r.text[-500:]
    return r.text


def test_torchtitan_dag_on_cluster_carries_the_llm_figures(airflow_db, sim_cluster_env, s3_server, tmp_path,
                                                           monkeypatch):
    from dlperf_tasks.airflow.dag_factory import build_dag
    from dlperf_tasks.catalog.loader import load_suite

    sim = sim_cluster_env
    ref = sim.image(TAG)
    digest = sim.state["digests"][ref]
    assert digest.startswith("sha256:")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(llm_catalog(tmp_path / "catalog", digest)))
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    bucket = s3_server.new_bucket("llm")
    store_url = s3_server.store_url(bucket, "dlperf")
    cfg = cluster_settings(sim.yaml_path, store_url, tmp_path / "work")
    scenario = {"count": 8, "name": H100, "driver": "580.159.04", "memory_total": 81559,
                "default": {"memory_used": 61000, "util": 97, "power": 655.0}}
    with gpu_scenario(sim, monkeypatch, lambda _: scenario):
        dag = build_dag("torchtitan", [load_suite(SUITE)], cfg)
        dr = dag.test(run_conf={"trials": 1})
    states = task_states(dr)
    assert state(dr) == "success", states
    (pub,) = json.loads((tmp_path / "work" / "last-torchtitan.json").read_text())["published"]
    run_id = pub["run_id"]

    # the run dir's result (exact: node names and registry addresses are redacted only in the store)
    local = json.loads((tmp_path / "work" / run_id / "result.json").read_text())
    assert local["run"]["planned_image_digest"] == digest
    (cell,) = local["cells"]
    (trial,) = cell["trials"]
    assert trial["status"] == "OK", trial["reason"]
    assert cell["unit"] == "tokens/s" and cell["median_speed"] == pytest.approx(TPS * 8, rel=1e-3)
    (env,) = trial["node_env"].values()
    assert env == {"gpu_model": H100, "image_digest": f"{ref.rsplit(':', 1)[0]}@{digest}"}
    figs = cell["llm"]["figures"]
    assert figs["tokens_per_sec_per_gpu"]["median"] == pytest.approx(TPS, rel=1e-3)
    full = flops_per_token("llama3.1-8b", 8192, "full") * TPS / 1e12
    half = flops_per_token("llama3.1-8b", 8192, "megatron_bridge") * TPS / 1e12
    assert figs["tflops_per_gpu"]["conventions"] == {"full": pytest.approx(full, rel=1e-3),
                                                     "megatron_bridge": pytest.approx(half, rel=1e-3)}
    assert figs["mfu_pct"]["median"] == pytest.approx(100 * full / 989.5, rel=1e-3)
    assert figs["mfu_pct"]["peak_tflops"] == 989.5 and "H100-SXM" in figs["mfu_pct"]["peak_source"]

    # the published result, report.md, the results page and the exports
    client = s3_server.client()
    prefix = pub["location"].removeprefix(f"s3://{bucket}/") + "/"
    published = json.loads(client.get_object(Bucket=bucket, Key=prefix + "result.json")["Body"].read())
    pfigs = published["cells"][0]["llm"]["figures"]
    assert pfigs["mfu_pct"]["median"] == pytest.approx(figs["mfu_pct"]["median"])
    report = client.get_object(Bucket=bucket, Key=prefix + "report.md")["Body"].read().decode()
    assert "## LLM figures" in report and "7,000.0" in report and f"{figs['mfu_pct']['median']:.1f}% of 990 TFLOP/s" in report
    page = _page(store_url, run_id)
    assert "tokens/s/GPU" in page and "7,000.0" in page and f"{figs['mfu_pct']['median']:.1f}% of 990 TFLOP/s" in page
    bmf = json.loads(to_bencher(published))
    (measures,) = bmf.values()
    assert measures["tokens-per-second-per-gpu"]["value"] == pytest.approx(TPS, rel=1e-3)
    assert measures["mfu-percent"]["value"] == pytest.approx(figs["mfu_pct"]["median"], rel=1e-5)
    om = to_openmetrics([published])
    assert "dlperf_tokens_per_second_per_gpu{" in om and "dlperf_mfu_ratio{" in om


def test_megatron_bridge_fp8_dag_on_cluster_grades_against_the_fp8_peak(airflow_db, sim_cluster_env, tmp_path,
                                                                       monkeypatch):
    """The other LLM runtime end to end: the ``dlperf_megatron_bridge`` DAG, Llama-3.1-8B FP8 on 1n8g.
    The stand-in prints Megatron-Bridge's own TFLOP/s/GPU 10 % above what its tokens/s give in
    Megatron-Bridge's convention: dlperf keeps its own figure, shows the printed one beside it and flags
    the difference; MFU is against the H100 SXM's dense FP8 peak, never the BF16 one."""
    from dlperf_tasks.airflow.dag_factory import build_dag
    from dlperf_tasks.catalog.loader import load_suite

    suite = "llama31-8b-megatron-bridge"
    sim = sim_cluster_env
    ref = sim.image("nemo:26.04")
    digest = sim.state["digests"][ref]
    half = flops_per_token("llama3.1-8b", 8192, "megatron_bridge") * TPS / 1e12
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(llm_catalog(tmp_path / "catalog", digest, suite, "dp8_gb128",
                                                              "fp8", tflops=round(half * 1.1, 1))))
    cfg = cluster_settings(sim.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work")
    scenario = {"count": 8, "name": H100, "driver": "580.159.04", "memory_total": 81559,
                "default": {"memory_used": 70000, "util": 98, "power": 690.0}}
    with gpu_scenario(sim, monkeypatch, lambda _: scenario):
        dr = build_dag("megatron_bridge", [load_suite(suite)], cfg).test(run_conf={"trials": 1})
    assert state(dr) == "success", task_states(dr)
    (pub,) = json.loads((tmp_path / "work" / "last-megatron_bridge.json").read_text())["published"]
    result = json.loads((tmp_path / "work" / pub["run_id"] / "result.json").read_text())
    (cell,) = result["cells"]
    (trial,) = cell["trials"]
    assert trial["status"] == "OK", trial["reason"]
    assert cell["unit"] == "tokens/s" and cell["median_speed"] == pytest.approx(TPS * 8, rel=1e-3)
    figs = cell["llm"]["figures"]
    assert figs["tokens_per_sec_per_gpu"]["median"] == pytest.approx(TPS, rel=1e-3)
    assert figs["tflops_per_gpu"]["conventions"]["megatron_bridge"] == pytest.approx(half, rel=1e-3)
    up = figs["tflops_per_gpu"]["upstream"]
    assert up["mismatch"] is True and up["convention"] == "megatron_bridge"
    full = flops_per_token("llama3.1-8b", 8192, "full") * TPS / 1e12
    assert figs["mfu_pct"]["peak_tflops"] == 1979  # H100 SXM dense FP8
    assert figs["mfu_pct"]["median"] == pytest.approx(100 * full / 1979, rel=1e-3)
    report = (tmp_path / "work" / pub["run_id"] / "report.md").read_text()
    assert "TFLOP/s/GPU printed by the framework differs by" in report


def test_a_node_without_the_pinned_digest_refuses_the_trial(sim_cluster_env, tmp_path):
    """At the trial's start each node must still hold the image by the pinned digest (pulled by
    digest at prepare): a node without it (the catalog pinned another digest since, the image was
    pruned) refuses the trial before anything starts, and the record says which digest each node held."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.model import ContainerSpec
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.core.model import TrialStatus
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.runtime import DockerRuntime
    from dlperf_tasks.remote.ssh import SSHPool
    from dlperf_tasks.remote.trial import finish_trial, start_trial

    sim = sim_cluster_env
    ref = sim.image(TAG)
    suite = load_suite(SUITE)
    trial = next(t.trial for t in plan(suite, {"trials": 1}).trials if t.trial.cell.topology.name == "1n8g")
    cluster = Cluster.from_yaml(sim.yaml_path)
    node = cluster.names[0]
    wrong = "sha256:" + "0" * 64
    runtime = DockerRuntime(ContainerSpec(image=ref, digest=wrong), registry=cluster.registry)
    assert runtime.image == f"{ref}@{wrong}"
    with SSHPool(cluster) as pool:
        st = start_trial(cluster, [node], trial, suite, "llm-digest-test", pool=pool, runtime=runtime)
        assert st["failed"] and st["failed"]["status"] == "LAUNCH_FAILED" and not st.get("ranks")
        assert f"has digest (none), the catalog pins {wrong}: trial refused" in st["failed"]["reason"]
        res = finish_trial(cluster, st, None, suite, tmp_path, pool=pool, runtime=runtime)
    assert res.status is TrialStatus.LAUNCH_FAILED and "trial refused" in res.reason
    assert res.node_env == {node: {"gpu_model": None, "image_digest": None}}
