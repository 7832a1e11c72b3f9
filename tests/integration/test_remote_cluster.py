"""Sweeps on the simulated cluster (docs/testcluster.md): real sshd nodes, real dockerd, real
registry with auth, the stand-in trainer image under NGC-like names. Only GPUs are simulated
(nodes claim 8; the stand-in replays the frameworks' log formats at configured speeds).

Checks: exact speeds 1n1g -> 4n8g with the expected ranks and launch arguments on every node
(per-node launch and MPI launch), HANG within the limit, wrong registry password before any
trial, a node killed mid-trial (NODE_UNREACHABLE naming it, the other nodes cleaned, the sweep
goes on), and that no labelled container or trial process is left after each test."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.core.model import TrialStatus
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import trial_process_check_command
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
WAIT = 400  # the shared simulated cluster may be leased by another session's sweep: wait for it
PT_SPEEDS = {"1n1g": 101.5, "1n8g": 790.25, "2n8g": 1500.5, "4n8g": 2900.75}


def sim_suite(tmp_path: Path, base: str, tag: str, speeds: dict, **over):
    """A copy of a catalog suite running the stand-in at the given speeds, fast."""
    data = yaml.safe_load((ROOT / f"dlperf_tasks/catalog/suites/{base}.yaml").read_text())
    data["id"] = f"{base}-{tag}"
    data["env"] = {"DLPERF_STANDIN_TIME_SCALE": "0.02", "DLPERF_STANDIN_RECORD": "/rec/record.jsonl",
                   **{f"DLPERF_STANDIN_SPEED_{t.upper()}": str(v) for t, v in speeds.items()},
                   **over.pop("env", {})}
    data["container"]["mounts"] = list(data["container"].get("mounts") or []) + [f"${{workdir}}/rec-{tag}:/rec"]
    if base == "pytorch-bert":  # where the stand-in image keeps DeepLearningExamples' BERT
        data["launcher"]["workdir"] = "/workspace/examples/bert"
        # one cell per topology here (accumulation 32 and seed 001's "no GradAcc" cells are swept in
        # test_standin_strict_cluster.py)
        data["gradient_accumulation_steps"] = [1]
        data.pop("exclude", None)
    data["window"] = {"warmup": 5, "measure": 20}
    data["topologies"] = list(speeds)
    data["timeout_s"], data["hang_timeout_s"] = 120, 60
    data.update(over)
    p = tmp_path / f"{data['id']}.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_suite(str(p))


def records(cluster, tag: str) -> dict[str, list[dict]]:
    out = {}
    for n in cluster.nodes:
        f = Path(n.workdir) / f"rec-{tag}" / "record.jsonl"
        out[n.name] = [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []
        subprocess.run(["rm", "-rf", str(f.parent)], check=True)
    return out


def assert_idle(sim, res) -> None:
    """No container labelled with the sweep's run id and no process carrying one of its trials'
    DLPERF_TRIAL on any node (other sessions may use the shared cluster at the same time)."""
    run_id = res.result["run"]["run_id"]
    assert sim.containers(f"dlperf.run={run_id}") == []
    c = Cluster.from_yaml(sim.yaml_path)
    keys = {r.trial.key for r in res.all}
    with SSHPool(c) as pool:
        for n in c.names:
            if sim.node_is_up(n):
                for k in keys:
                    assert pool.run(n, trial_process_check_command(k), timeout=60).stdout.split() == [], (n, k)
                wd = c.node(n).workdir
                out = pool.run(n, f"cat {wd}/.lease/run_id 2>/dev/null || true").stdout.strip()
                assert out != run_id, n


def test_per_node_sweep_1n1g_to_4n8g_exact(sim_cluster_env, tmp_path):
    sim = sim_cluster_env
    suite = sim_suite(tmp_path, "pytorch-bert", "pt", PT_SPEEDS)
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), tmp_path / "out",
                    SweepOptions(progress=None, lease_wait_s=WAIT))
    cells = {c["topology"]: c for c in res.result["cells"]}
    assert {t: cells[t]["median_speed"] for t in PT_SPEEDS} == PT_SPEEDS, [(t.trial.id, t.reason) for t in res.all]
    assert cells["4n8g"]["trials"][0]["node_names"] == ["node1", "node2", "node3", "node4"]
    assert res.result["run"]["image"] == sim.image("pytorch:20.06-py3")
    assert res.result["run"]["image_digest"].startswith(sim.image("pytorch:20.06-py3").rsplit(":", 1)[0] + "@sha256:")
    recs = records(sim, "pt")
    master = sim.node("node1").host
    four = {n: [r for r in rs if r["world"] == 32] for n, rs in recs.items()}
    for i, name in enumerate(["node1", "node2", "node3", "node4"]):
        assert sorted(int(r["env"]["RANK"]) for r in four[name]) == list(range(8 * i, 8 * i + 8)), name
        assert {r["env"]["MASTER_ADDR"] for r in four[name]} == {master}
        assert all("--train_batch_size=32" in r["argv"] for r in four[name])
    assert (tmp_path / "out" / "report.md").exists()
    assert_idle(sim, res)


def test_mpi_sweep_exact(sim_cluster_env, tmp_path):
    """An MPI sweep across the nodes' containers; its 2-node cell is probed first (nccl-tests
    ``all_reduce_perf`` through the same mpirun and image, engine/probe.py): the stand-in's links give
    150 GB/s algbw at the top, below 80 % of the 400 GB/s the suite expects, so the cell is flagged and,
    being slow (scaling efficiency 0.78), attributed to the interconnect."""
    sim = sim_cluster_env
    speeds = {"1n1g": 120.5, "2n8g": 1500.5}
    probe = {"expected_busbw_gbs": 400.0, "max_bytes": "64M", "timeout_s": 90, "env": {"DLPERF_STANDIN_ALGBW": "150"}}
    suite = sim_suite(tmp_path, "mxnet-bert", "mx", speeds, interconnect_probe=probe)
    p = plan(suite, {"batch_sizes": "32", "trials": 1})
    # the simulated nodes' own sshd listens on 2222, the suite's container sshd port: use another
    res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), tmp_path / "out",
                    SweepOptions(progress=None, mpi_ssh_port=2223, lease_wait_s=WAIT))
    cells = {c["topology"]: c for c in res.result["cells"]}
    assert {t: cells[t]["median_speed"] for t in speeds} == speeds, [t.reason for t in res.all]
    recs = records(sim, "mx")
    two = {n: sorted(r["rank"] for r in rs if r["world"] == 16) for n, rs in recs.items()}
    nodes = cells["2n8g"]["trials"][0]["node_names"]
    assert sorted(two[nodes[0]] + two[nodes[1]]) == list(range(16))
    assert two[nodes[0]] == list(range(8))  # mpirun -H fills node 0 first (-map-by slot)
    ic = cells["2n8g"]["interconnect"]
    assert "interconnect" not in cells["1n1g"] and cells["2n8g"]["trials"][0]["interconnect"]["nodes"] == nodes
    assert ic["nranks"] == 16 and ic["transports"] == ["NET/IB"] and ic["sizes"][-1]["bytes"] == 64 << 20
    assert ic["busbw_gbs"] == pytest.approx(ic["sizes"][-1]["algbw_gbs"] * 2 * 15 / 16) and 250 < ic["busbw_gbs"] < 320
    assert ic["flags"] == [f"interconnect probe: bus bandwidth {ic['busbw_gbs']:.1f} GB/s is below 80% of the "
                           "expected 400.0 GB/s"]
    assert cells["2n8g"]["slow_attribution"].startswith("slow cell (scaling efficiency 0.78 < 0.90): the interconnect moved")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Interconnect probe" in report and f"| {cells['2n8g']['cell_id']} | {nodes[0]}, {nodes[1]} |" in report
    assert (tmp_path / "out" / ic["log"]).read_text().count(" via NET/IB/0") == 16  # every rank's NCCL INFO line
    assert_idle(sim, res)  # the probe's containers and processes too (same run id)


def test_hang_detected_within_limit(sim_cluster_env, tmp_path):
    sim = sim_cluster_env
    suite = sim_suite(tmp_path, "pytorch-bert", "hang", {"1n1g": 100.0}, hang_timeout_s=5,
                      env={"DLPERF_STANDIN_HANG_AFTER": "8"})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    t0 = time.monotonic()
    res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), tmp_path / "out",
                    SweepOptions(progress=None, retries=0, nodes=["node4"], capture_env=False, lease_wait_s=WAIT))
    (r,) = res.ran
    assert r.status == TrialStatus.HANG and "after iteration 8" in r.reason
    assert r.finished_at - r.started_at < 5 + 10
    log = tmp_path / "out" / r.log_paths[0]
    assert "Training Epoch" in log.read_text()
    assert time.monotonic() - t0 < 60
    records(sim, "hang")
    assert_idle(sim, res)


def test_wrong_registry_password_fails_before_any_trial(sim_cluster_env, tmp_path, monkeypatch):
    sim = sim_cluster_env
    monkeypatch.setenv("DLPERF_REGISTRY_PASSWORD", "wrong-password")
    suite = sim_suite(tmp_path, "pytorch-bert", "pw", {"1n1g": 100.0})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    with pytest.raises(RemoteError, match=r"docker login to registry 127\.0\.0\.1:\d+ as .* failed on node node\d"):
        run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), tmp_path / "out",
                  SweepOptions(progress=None, capture_env=False, lease_wait_s=WAIT))
    assert not (tmp_path / "out" / "trials").exists()
    # the login went inside the engine API request (remote/engine.py): nothing was written on the node
    import glob
    import tempfile

    assert glob.glob(f"{tempfile.gettempdir()}/dlperf-docker-config.*") == []


def test_node_killed_mid_trial(sim_cluster_factory, tmp_path, monkeypatch):
    """A private 2-node cluster (killing nodes of the shared one would disturb other tests)."""
    sim = sim_cluster_factory("remote-faults", nodes=2)
    for k, v in sim.env.items():
        monkeypatch.setenv(k, v)
    speeds = {"1n1g": 100.0, "2n8g": 1500.0}
    suite = sim_suite(tmp_path, "pytorch-bert", "kill", speeds,
                      env={"DLPERF_STANDIN_TIME_SCALE": "0.3"})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 2})
    cluster = Cluster.from_yaml(sim.yaml_path)
    killed = threading.Event()
    run_id = f"kill-test-{time.time_ns()}"  # the shared dockerd also runs other sessions' containers

    def killer():
        # wait until the first 2-node trial's containers run on both nodes, then kill node2
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            nodes = {c["Labels"].get("dlperf.node") for c in sim.containers(f"dlperf.run={run_id}", all=False)}
            if {"node1", "node2"} <= nodes:
                time.sleep(1.0)
                sim.kill_node("node2")
                killed.set()
                return
            time.sleep(0.2)

    th = threading.Thread(target=killer)
    th.start()
    try:
        res = run_sweep(suite, p, cluster, tmp_path / "out",
                        SweepOptions(progress=None, unreachable_grace_s=3, capture_env=False, policy="sequential",
                                     run_id=run_id, lease_wait_s=WAIT))
    finally:
        th.join()
        sim.revive_node("node2")
    assert killed.is_set()
    by_topo: dict[str, list] = {}
    for r in res.all:
        by_topo.setdefault(r.trial.cell.topology.name, []).append(r)
    unreachable = [r for r in by_topo["2n8g"] if r.status == TrialStatus.NODE_UNREACHABLE]
    assert unreachable and all("node2" in r.reason and "node1 unreachable" not in r.reason for r in unreachable)
    # the sweep went on: the single-node trials ran on the surviving node
    assert [r.status for r in by_topo["1n1g"]] == [TrialStatus.OK, TrialStatus.OK]
    assert all(r.nodes == ["node1"] for r in by_topo["1n1g"])
    records(sim, "kill")
    left = sim.containers(f"dlperf.run={res.result['run']['run_id']}")
    assert left == [], [(c["Names"], c["State"], c["Status"], c["Labels"]) for c in left]
