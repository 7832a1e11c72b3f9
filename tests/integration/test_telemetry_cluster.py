"""Telemetry sampler on the simulated cluster: real sshd nodes, the real SSH pool and detached
jobs, the real /proc loop. Only the GPUs are simulated: the nodes run the STAND-IN nvidia-smi
(docker/standin/rootfs/usr/local/bin/nvidia-smi, real CSV / -q formats) with values this test
chooses, and its "driver" logs XIDs to a file the sampler's kernel-log reader is pointed at."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest

from dlperf_tasks.remote import jobs
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.telemetry import summarise_trial
from dlperf_tasks.telemetry.sampler import RemoteSampler, TelemetryConfig, start_detached

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
STANDIN_SMI = str(ROOT / "docker" / "standin" / "rootfs" / "usr" / "local" / "bin" / "nvidia-smi")


def standin_config(**policy) -> TelemetryConfig:
    """What a simulated-cluster run sets (``DLPERF_TELEMETRY``): the stand-in tool, its kernel log."""
    return TelemetryConfig.from_dict({"interval_s": 0.5, "nvidia_smi": STANDIN_SMI,
                                      "kernel_log_cmd": 'cat "$DLPERF_NODE_WORKDIR/standin-kmsg" 2>/dev/null',
                                      "policy": policy})


def write_scenario(node, scenario: dict) -> Path:
    wd = Path(node.workdir)
    wd.mkdir(parents=True, exist_ok=True)
    (wd / "standin-kmsg").write_text("[    1.000000] NVRM: Xid (PCI:0000:97:00): 13, pid=1, old error\n")
    path = wd / "standin-gpus.json"
    path.write_text(json.dumps({**scenario, "kernel_log": str(wd / "standin-kmsg")}))
    return path


def test_sampler_on_two_nodes_memory_throttle_xid_cpu_bound(sim_cluster):
    cluster = Cluster.from_yaml(sim_cluster.yaml_path)
    n1, n2 = sim_cluster.node("node1"), sim_cluster.node("node2")
    # node1: GPU 0 at 14362 MiB, a thermal episode over most of the run; an XID 79 on GPU 1 after 1 s
    s1 = write_scenario(n1, {"count": 8, "gpus": {"0": {"memory_used": 14362, "util": 97, "power": 350.5},
                                                  "1": {"memory_used": 14100, "util": 96}},
                             "episodes": [{"gpu": 0, "start": 0.0, "end": 60.0, "reasons": 0x40, "sm": 705}],
                             "xids": [{"gpu": 1, "at": 1.0, "code": 79, "text": "GPU has fallen off the bus."}]})
    # node2: idle GPUs (util 0) while the trial's processes burn the node's cores: CPU-bound
    s2 = write_scenario(n2, {"count": 8, "default": {"memory_used": 2048, "util": 0}})
    key = "h7telemetry01"
    try:
        with SSHPool(cluster) as pool:
            sampler = RemoteSampler(pool, ["node1", "node2"], key, standin_config(),
                                    gpu_indices={"node1": [0, 1], "node2": [0]})
            sampler.start()
            assert sampler.errors == []
            burn = "python3 -c " + shlex.quote(
                "import multiprocessing as m, time\n"
                "def b():\n    t=time.time()\n    while time.time()-t<5: pass\n"
                "ps=[m.Process(target=b) for _ in range(2)]\n[p.start() for p in ps]\n[p.join() for p in ps]")
            burner = start_detached(pool, "node2", burn, "h7burn", env={"DLPERF_TRIAL": key})
            t_start = time.time()
            deadline = time.time() + 30
            while jobs.exit_code(pool, burner) is None and time.time() < deadline:
                time.sleep(0.3)
            t_end = time.time()
            raw = sampler.stop()
            jobs.remove_job_dir(pool, burner)
            assert sampler.errors == []
            # the loops are gone from the nodes
            assert not [p for p in sim_cluster.processes("node1") if "nvidia-smi" in p[1] or "/proc/stat" in p[1]]
    finally:
        s1.unlink(missing_ok=True)
        s2.unlink(missing_ok=True)
    out = summarise_trial(raw, window=(t_start + 1.0, t_end - 0.5), launched_at=t_start - 2, first_iteration_at=t_start)
    a, b = out["nodes"]["node1"], out["nodes"]["node2"]
    assert a["gpu"] == "present" and a["gpus"]["0"]["peak_memory_mib"] == 14362
    assert a["gpus"]["1"]["peak_memory_mib"] == 14100 and list(a["gpus"]) == ["0", "1"]
    assert a["gpus"]["0"]["mean_power_w"] == 350.5 and a["gpus"]["0"]["mean_sm_clock_mhz"] == 705
    assert a["gpus"]["0"]["throttle_reasons"].keys() == {"hw_thermal_slowdown"} and a["gpus"]["0"]["throttled_share"] > 0.9
    assert a["xids"] == [{"gpu": 1, "code": 79, "text": "pid=4242, name=python3, GPU has fallen off the bus."}]
    assert out["peak_memory_mib"] == 14362 and out["startup_s"] == 2.0
    kinds = {(f["kind"], f["node"]): f for f in out["flags"]}
    assert kinds[("throttled", "node1")]["action"] == "flag"
    assert kinds[("xid", "node1")]["action"] == "invalid" and "new XID 79 on GPU 1" in out["invalid_reason"]
    cb = kinds[("cpu_bound", "node2")]
    assert "while GPU utilisation averaged 0%" in cb["detail"], cb
    # the burners' own CPU (their process tree): 2 busy processes, but this VM's 2 cores are shared
    assert b["host"]["tree_cores"] > 0.3 and "the trial's processes" in cb["detail"]
    assert b["gpus"]["0"]["peak_memory_mib"] == 2048
    assert set(out["labels"]) == {"throttled", "XID", "CPU-bound"}


def test_absent_nvidia_smi_is_recorded_not_fatal(sim_cluster):
    cluster = Cluster.from_yaml(sim_cluster.yaml_path)
    with SSHPool(cluster) as pool:
        s = RemoteSampler(pool, ["node3"], "h7telemetry02", TelemetryConfig(interval_s=0.5, nvidia_smi="nvidia-smi"))
        s.start()
        time.sleep(1.5)
        raw = s.stop()
    assert s.errors == []
    out = summarise_trial(raw)
    assert out["nodes"]["node3"]["gpu"] == "absent" and out["flags"] == [] and out["peak_memory_mib"] is None
    assert out["nodes"]["node3"]["host"]["samples"] >= 1
