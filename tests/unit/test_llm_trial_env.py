"""What each trial ran with, from the nodes: the GPU model and the image digest.

The GPU model the MFU is judged against comes from the nodes: nvidia-smi's ``name`` in the
environment capture, carried per trial into the gate (``node_env``). Names are the ones real
machines print (sources in measure/data/gpu_peaks.json's "names"); the GPUs themselves are the
stand-in nvidia-smi (docker/standin/rootfs/usr/local/bin/nvidia-smi, the real tool's formats).
The plan carries the digest the catalog pins (a node holding another refuses the trial: the
simulated cluster's test, tests/integration/test_llm_cluster.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import BUILTIN_DIR, load_suite
from dlperf_tasks.catalog.plan import Plan, plan
from dlperf_tasks.core.model import Sample, TrialResult, TrialStatus
from dlperf_tasks.frameworks import get
from dlperf_tasks.measure import llm_metrics
from dlperf_tasks.measure.validity import gate
from dlperf_tasks.remote import envcapture
from dlperf_tasks.remote.dockercmd import NodeFacts
from dlperf_tasks.remote.runtime import HostRuntime
from dlperf_tasks.remote.ssh import CommandResult
from dlperf_tasks.remote.trial import node_env
from dlperf_tasks.report.result_json import trial_from_record, trial_record
from tests.unit.test_llm_suites import SCRIPT_MB, _nodes, _standin

ROOT = Path(__file__).resolve().parents[2]
STANDIN_SMI = ROOT / "docker/standin/rootfs/usr/local/bin/nvidia-smi"


@pytest.mark.parametrize("printed,key", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"), ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-SXM4-40GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA GB200", "GB200"), ("NVIDIA GB300", "GB300"), ("  NVIDIA  H100 80GB HBM3 ", "H100-SXM")])
def test_nvidia_smi_names_resolve_to_the_peak_table(printed, key):
    assert llm_metrics.resolve_gpu(printed) == (key, None)


@pytest.mark.parametrize("printed", ["NVIDIA H200 NVL", "NVIDIA H800", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090"])
def test_other_gpus_are_unknown_with_the_reason(printed):
    key, why = llm_metrics.resolve_gpu(printed)
    assert key is None and repr(printed) in why and "not in the peak table" in why


def test_trial_gpu_needs_one_model_on_every_node():
    assert llm_metrics.trial_gpu({"n0": "NVIDIA H200", "n1": "NVIDIA H200"}) == ("NVIDIA H200", None)
    mixed = llm_metrics.trial_gpu({"n0": "NVIDIA H200", "n1": "NVIDIA H100 80GB HBM3"})
    assert mixed[0] is None and "different GPU models" in mixed[1] and "n1: NVIDIA H100 80GB HBM3" in mixed[1]
    partial = llm_metrics.trial_gpu({"n0": "NVIDIA H200", "n1": None})
    assert partial[0] is None and "node(s) n1" in partial[1]
    assert "absent" in llm_metrics.trial_gpu({"n0": "absent"})[1]
    assert "no environment capture" in llm_metrics.trial_gpu({})[1]


class _LocalPool:
    """Runs a node's command on this machine (the probe scripts are plain sh)."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def run(self, node: str, command: str, timeout: float | None = 60.0, **_):
        p = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout, env=self.env)
        return CommandResult(node, command, p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA GB200"])
def test_env_capture_reads_the_model_nvidia_smi_prints_into_the_node_facts(tmp_path, name):
    scenario = tmp_path / "gpus.json"
    scenario.write_text(json.dumps({"count": 8, "name": name, "driver": "580.159.04", "memory_total": 81559}))
    pool = _LocalPool({"PATH": "/usr/bin:/bin", "DLPERF_STANDIN_GPUS": str(scenario)})
    facts = NodeFacts("n0")
    env = envcapture.capture_node(pool, "n0", HostRuntime(), facts, nvidia_smi=str(STANDIN_SMI))  # type: ignore[arg-type]
    assert env["gpu_model"] == name and facts.gpu_model == name and env["driver"] == "580.159.04"
    assert len(env["gpus"]) == 8
    none = NodeFacts("n1")
    absent = envcapture.capture_node(pool, "n1", HostRuntime(), none,  # type: ignore[arg-type]
                                     nvidia_smi=str(tmp_path / "no-such-nvidia-smi"))
    assert absent["gpu_model"] == "absent" and none.gpu_model is None


def test_a_node_with_two_gpu_models_is_mixed():
    rows = [{"model": "NVIDIA H100 80GB HBM3"}, {"model": "NVIDIA H100 PCIe"}]
    assert envcapture.gpu_model(rows) == "mixed: NVIDIA H100 80GB HBM3, NVIDIA H100 PCIe"
    assert llm_metrics.resolve_gpu("mixed: NVIDIA H100 80GB HBM3, NVIDIA H100 PCIe")[0] is None


def _megatron_trial_and_log():
    """A 1n8g BF16 trial of the Megatron-Bridge suite and what the stand-in trainer prints for it."""
    suite = load_suite("llama31-8b-megatron-bridge")
    t = next(t.trial for t in plan(suite, {"trials": 1, "warmup_iters": 3, "measure_iters": 6}).trials
             if t.trial.cell.topology.name == "1n8g" and t.trial.cell.precision == "bf16")
    argv = get(suite.framework).launch(t, 0, _nodes(1), suite.launcher).argv
    res = _standin(f"opt/Megatron-Bridge/{SCRIPT_MB}", argv[argv.index(SCRIPT_MB) + 1:], 7, 8,
                   DLPERF_STANDIN_TPS_PER_GPU="7000", DLPERF_STANDIN_TFLOPS="380")
    assert res.returncode == 0, res.stderr[-500:]
    return t, res.stdout.splitlines(keepends=True)


@pytest.mark.parametrize("printed,peak", [("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA H200", 989.5),
                                          ("NVIDIA B200", 2250), ("NVIDIA GB200", 2500)])
def test_the_gate_judges_mfu_against_the_nodes_gpu(printed, peak):
    t, lines = _megatron_trial_and_log()
    fw = get(t.cell.framework)
    res = gate(fw, t, fw.parse(lines), gpu_models={"n0": printed})
    assert res.status is TrialStatus.OK, res.reason
    llm = res.metric.details["llm"]
    mfu = llm["figures"]["mfu_pct"]
    assert mfu["peak_tflops"] == peak and llm["cell"]["gpu_name"] == printed
    tf = llm["figures"]["tflops_per_gpu"]["value"]
    assert mfu["value"] == pytest.approx(100 * tf / peak)


@pytest.mark.parametrize("models,why", [({"n0": "NVIDIA H800"}, "'NVIDIA H800' is not in the peak table"),
                                        ({"n0": None}, "nvidia-smi reported no GPU model"),
                                        (None, "no environment capture")])
def test_no_known_gpu_refuses_mfu_and_keeps_tokens(models, why):
    t, lines = _megatron_trial_and_log()
    fw = get(t.cell.framework)
    res = gate(fw, t, fw.parse(lines), gpu_models=models)
    figs = res.metric.details["llm"]["figures"]
    assert figs["mfu_pct"]["value"] is None and why in figs["mfu_pct"]["reason"]
    assert figs["tokens_per_sec_per_gpu"]["value"] > 0 and figs["tflops_per_gpu"]["value"] > 0


def test_the_trial_record_keeps_each_nodes_gpu_and_digest():
    t, _ = _megatron_trial_and_log()
    digest = "nvcr.io/nvidia/nemo@sha256:" + "a" * 64
    env = node_env({"n0": NodeFacts("n0", gpu_model="NVIDIA H200", image_digest=digest)}, ["n0", "n1"])
    assert env == {"n0": {"gpu_model": "NVIDIA H200", "image_digest": digest},
                   "n1": {"gpu_model": None, "image_digest": None}}
    res = TrialResult(trial=t, status=TrialStatus.OK, samples=[Sample(1, 1.0, "ms/iter")], node_env=env)
    back = trial_from_record(json.loads(json.dumps(trial_record(res))))
    assert back.node_env == env
    assert "node_env" not in trial_record(TrialResult(trial=t, status=TrialStatus.OK))["trial"]


def _pinned_suite(tmp_path, digest: str):
    data = yaml.safe_load((BUILTIN_DIR / "llama31-8b-megatron-bridge.yaml").read_text())
    data["container"]["digest"] = digest
    p = tmp_path / "llama31-8b-megatron-bridge.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_suite(str(p))


def test_the_plan_carries_the_digest_the_catalog_pins_for_its_image(tmp_path):
    digest = "sha256:" + "ab" * 32
    suite = _pinned_suite(tmp_path, digest)
    p = plan(suite, {"trials": 1})
    assert p.image == "nvcr.io/nvidia/nemo:26.04" and p.image_digest == digest
    assert Plan.from_dict(json.loads(json.dumps(p.to_dict()))).image_digest == digest
    assert plan(suite, {"trials": 1, "image_tag": "26.06"}).image_digest is None  # another tag: not pinned
    assert plan(load_suite("llama31-8b-torchtitan"), {"trials": 1}).image_digest is None  # unset in the catalog


@pytest.mark.parametrize("suite_id", ["llama31-8b-torchtitan", "llama31-8b-megatron-bridge"])
def test_the_suites_env_reaches_the_llm_trainer(suite_id):
    """The suite's ``env:`` (handed to launch() as settings["env"]) is in every rank's environment."""
    suite = load_suite(suite_id)
    t = plan(suite, {"trials": 1}).trials[0].trial
    spec = get(suite.framework).launch(t, 0, _nodes(t.cell.topology.nodes),
                                       {**suite.launcher, "env": {"NCCL_DEBUG": "INFO", "DLPERF_X": "1"}})
    assert spec.env["NCCL_DEBUG"] == "INFO" and spec.env["DLPERF_X"] == "1" and spec.env["PYTHONUNBUFFERED"] == "1"


def test_an_llm_result_survives_redaction_unchanged():
    """Figure names such as ``energy_j_per_token`` are units, not credentials: the published copy of
    an LLM result is the same JSON (a secret next to them is still redacted)."""
    from dlperf_tasks.measure.stats import aggregate
    from dlperf_tasks.report.result_json import build_result, dumps
    from dlperf_tasks.store.redact import Redactor

    t, lines = _megatron_trial_and_log()
    fw = get(t.cell.framework)
    res = gate(fw, t, fw.parse(lines), gpu_models={"n0": "NVIDIA H100 80GB HBM3"})
    text = dumps(build_result(aggregate([res]), {"run_id": "r1", "suite": "llama31-8b-megatron-bridge"}))
    assert '"energy_j_per_token": {' in text
    assert json.loads(Redactor().redact_text(text)) == json.loads(text)
    assert "s3cr3t" not in Redactor().redact_text('"energy_j_per_token": 1.0, "api_token": "s3cr3t-value"')


def test_the_sources_a_result_names_pass_the_leak_scanner():
    """Peak and reference sources name files at commits (``owner/repo@commit:path``): the published
    result shows them, so the leak scanner must not take them for user@host; a real one still is."""
    from dlperf_tasks.measure.llm_checks import references
    from dlperf_tasks.store.leakscan import LeakScanner

    scan = LeakScanner()
    texts = [r["source"] for r in references()] + [g["source"] for g in llm_metrics.gpu_table().values()]
    assert any("Megatron-Bridge@" in t for t in texts) and any("utils.py@b5bcd76" in t for t in texts)
    assert [t for t in texts if scan.scan_line(t)] == []
    assert scan.scan_line("ran by alice@gpu-node7 and bob@3f2a1c9d8e7b")
