"""Node leases on real sshd nodes, raced by several real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf_tasks.remote.allocation import Leases, NodeBusy, acquire, release
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool
from tests.fixtures.sshd_nodes import make_nodes, stop_nodes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes, path = make_nodes(tmp_path_factory.mktemp("sshd"), 2, base_octet=51)
    yield nodes, path
    stop_nodes(nodes)


def test_exclusive_then_released(cluster):
    nodes, path = cluster
    with SSHPool(Cluster.from_yaml(path)) as pool:
        a = acquire(pool, "node1", "runA", ttl_s=60, owner="A")
        with pytest.raises(NodeBusy, match="node node1 is leased by another sweep \\(A run=runA"):
            acquire(pool, "node1", "runB", ttl_s=60, owner="B")
        assert release(pool, a)
        b = acquire(pool, "node1", "runB", ttl_s=60, owner="B")
        assert not release(pool, a)  # a stale holder cannot release someone else's lease
        assert release(pool, b)


def test_stale_lease_is_taken_over(cluster):
    nodes, path = cluster
    with SSHPool(Cluster.from_yaml(path)) as pool:
        acquire(pool, "node2", "dead-run", ttl_s=1, owner="crashed")
        time.sleep(2.2)
        lease = acquire(pool, "node2", "new-run", ttl_s=60, owner="B")
        assert lease.taken_over_from == "crashed"
        release(pool, lease)


def test_leases_renewed_while_held(cluster):
    nodes, path = cluster
    with SSHPool(Cluster.from_yaml(path)) as pool:
        with Leases(pool, ["node1"], "runR", ttl_s=3) as held:
            assert held == ["node1"]
            time.sleep(4)  # longer than the ttl: still ours thanks to renewal
            with pytest.raises(NodeBusy):
                acquire(pool, "node1", "other", ttl_s=60)
        release_ok = acquire(pool, "node1", "other", ttl_s=60)  # released on exit
        release(pool, release_ok)


CHILD = r"""
import sys, time, json
sys.path.insert(0, {root!r})
from dlperf_tasks.remote.allocation import Leases
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool
pool = SSHPool(Cluster.from_yaml({path!r}))
with Leases(pool, ["node1", "node2"], sys.argv[1], min_nodes=1, wait_s=30, ttl_s=30) as held:
    t0 = time.time(); time.sleep(1.5); t1 = time.time()
    print(json.dumps({{"run": sys.argv[1], "nodes": held, "t0": t0, "t1": t1}}))
"""


def test_concurrent_processes_never_share_a_node(cluster, tmp_path):
    import json

    nodes, path = cluster
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT), path=str(path)))
    procs = [subprocess.Popen([sys.executable, str(script), f"r{i}"], stdout=subprocess.PIPE, text=True)
             for i in range(3)]
    outs = [json.loads(p.communicate(timeout=90)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    for a in outs:
        for b in outs:
            if a is b:
                continue
            if set(a["nodes"]) & set(b["nodes"]):
                assert a["t1"] <= b["t0"] or b["t1"] <= a["t0"], (a, b)
