"""The trial runner on real sshd nodes with the host runtime (no container) and the stand-in
trainer (docker/standin) replaying the PyTorch BERT log format: success with the exact speed,
HANG, NONZERO_EXIT, TIMEOUT and a node dying mid-trial. GPUs are not needed (the stand-in
launcher fakes torch.distributed.launch)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import HostRuntime
from dlperf_tasks.remote.trial import TrialWatch, run_trial
from dlperf_tasks.core.topology import Topology
from tests.fixtures.sshd_nodes import make_nodes, open_pool, stop_nodes

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "docker" / "standin" / "rootfs"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes, path = make_nodes(tmp_path_factory.mktemp("sshd"), 2, base_octet=31)
    yield nodes, Cluster.from_yaml(path)
    stop_nodes(nodes)


@pytest.fixture
def pool(cluster):
    with open_pool(*cluster) as p:
        yield p


def suite_with(tmp_path, **env):
    base = load_suite("pytorch-bert")
    record = tmp_path / "record.jsonl"
    e = {"PYTHONPATH": str(STANDIN / "usr/lib/python3/dist-packages"), "DLPERF_STANDIN_TIME_SCALE": "0.05",
         "DLPERF_STANDIN_RECORD": str(record)}
    e.update(env)
    return dataclasses.replace(base, container=None, env=e, env_multi_node={},
                               launcher={**base.launcher, "workdir": str(STANDIN / "workspace/examples/bert"),
                                         # host runtime: the catalog's node files (BERT-base config) from here
                                         "node_files_dir": str(ROOT / "dlperf_tasks/catalog/data")},
                               window=Window(5, 20), timeout_s=60, hang_timeout_s=30), record


def trial_for(suite, topo: str, index: int = 1) -> Trial:
    return Trial(Cell(suite.id, suite.framework, suite.model, "fp32", 32, Topology.parse(topo), window=suite.window),
                 index)


def assert_idle(pool, names, trial):
    rt = HostRuntime()
    for n in names:
        assert rt.leftovers(pool, n, "run1", trial.key) == [], n


def test_two_node_trial_returns_configured_speed(pool, cluster, tmp_path):
    suite, record = suite_with(tmp_path, DLPERF_STANDIN_SPEED_2N2G="401.25")
    trial = trial_for(suite, "2n2g")
    res = run_trial(cluster[1], ["node1", "node2"], trial, suite, "run1", tmp_path / "out", pool=pool, watch=TrialWatch(poll_s=0.2))
    assert res.status == TrialStatus.OK, res.reason
    assert res.metric.value == pytest.approx(401.25)
    assert res.nodes == ["node1", "node2"] and res.exit_codes == {"node1": 0, "node2": 0}
    from dlperf_tasks import frameworks

    fw = frameworks.get("pytorch_bert")
    assert (tmp_path / "out" / fw.log_relpath(trial, 0)).stat().st_size > 0
    assert (tmp_path / "out" / fw.log_relpath(trial, 1)).is_file()
    ranks = [json.loads(line) for line in record.read_text().splitlines()]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3]
    # node_rank 1's processes ran with --node_rank=1 and node1's address as master
    node1_addr = cluster[1].node("node1").host
    for r in ranks:
        assert any(f"--master_addr={node1_addr}" == a for a in r["argv"]) or r["env"].get("MASTER_ADDR") == node1_addr
    assert_idle(pool, ["node1", "node2"], trial)


def test_hang_is_killed_and_log_kept(pool, cluster, tmp_path):
    suite, _ = suite_with(tmp_path, DLPERF_STANDIN_HANG_AFTER="8")
    suite = dataclasses.replace(suite, hang_timeout_s=3)
    trial = trial_for(suite, "1n2g", 2)
    t0 = time.monotonic()
    res = run_trial(cluster[1], ["node2"], trial, suite, "run1", tmp_path / "out", pool=pool, watch=TrialWatch(poll_s=0.2))
    took = time.monotonic() - t0
    assert res.status == TrialStatus.HANG, res.reason
    assert "after iteration" in res.reason
    assert took < 3 + 10
    from dlperf_tasks import frameworks

    log = (tmp_path / "out" / frameworks.get("pytorch_bert").log_relpath(trial, 0)).read_text()
    assert "Training Epoch" in log
    assert_idle(pool, ["node2"], trial)


def test_crash_is_nonzero_exit(pool, cluster, tmp_path):
    suite, _ = suite_with(tmp_path, DLPERF_STANDIN_CRASH_AFTER="3", DLPERF_STANDIN_EXIT_CODE="3")
    trial = trial_for(suite, "1n2g", 3)
    res = run_trial(cluster[1], ["node1"], trial, suite, "run1", tmp_path / "out", pool=pool, watch=TrialWatch(poll_s=0.2))
    assert res.status == TrialStatus.NONZERO_EXIT, res.reason
    assert "node1" in res.reason
    assert_idle(pool, ["node1"], trial)


def test_wall_clock_timeout(pool, cluster, tmp_path):
    suite, _ = suite_with(tmp_path, DLPERF_STANDIN_TIME_SCALE="1")
    suite = dataclasses.replace(suite, timeout_s=2)
    trial = trial_for(suite, "1n1g", 4)
    res = run_trial(cluster[1], ["node1"], trial, suite, "run1", tmp_path / "out", pool=pool, watch=TrialWatch(poll_s=0.2))
    assert res.status == TrialStatus.TIMEOUT, res.reason
    assert_idle(pool, ["node1"], trial)


def test_bad_launcher_setting_is_launch_failed(pool, cluster, tmp_path):
    suite, _ = suite_with(tmp_path)
    suite = dataclasses.replace(suite, launcher={**suite.launcher, "master_port": "not-a-port"})
    res = run_trial(cluster[1], ["node1"], trial_for(suite, "1n1g", 5), suite, "run1", tmp_path / "out", pool=pool)
    assert res.status == TrialStatus.LAUNCH_FAILED and "master_port" in res.reason


def test_node_dies_mid_trial(pool, cluster, tmp_path):
    nodes, c = cluster
    suite, _ = suite_with(tmp_path, DLPERF_STANDIN_TIME_SCALE="0.5")
    trial = trial_for(suite, "2n1g", 6)
    import threading

    def killer():
        time.sleep(2.0)
        nodes[1].kill()

    th = threading.Thread(target=killer)
    th.start()
    res = run_trial(c, ["node1", "node2"], trial, suite, "run1", tmp_path / "out", pool=pool,
                    watch=TrialWatch(poll_s=0.2, unreachable_grace_s=2))
    th.join()
    assert res.status == TrialStatus.NODE_UNREACHABLE, res.reason
    assert "node2" in res.reason and "node1 unreachable" not in res.reason
    assert_idle(pool, ["node1"], trial)
    # the processes on the dead node are orphaned there (we could not reach it); clean them for the next tests
    nodes[1].start()
    for _ in range(50):
        left = HostRuntime().leftovers(pool, "node2", "run1", trial.key)
        if not left:
            break
        pool.run("node2", f"kill -9 {' '.join(p.split()[1] for p in left)} 2>/dev/null; true")
        time.sleep(0.1)

