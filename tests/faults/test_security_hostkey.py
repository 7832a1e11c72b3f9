"""SSH host-key checking is ON by default: an unknown or changed host key is refused (the real
sshd of a simulated node answers with its own key), unless the inventory explicitly opts out
with ``strict_host_key_checking: false`` (Airflow connections: ``no_host_key_check: true``).
A sweep against an unknown host fails before any trial, naming the node; known_hosts is never
written by dlperf."""

from __future__ import annotations

import shutil
from pathlib import Path

import paramiko
import pytest
import yaml

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, leftovers, sim_suite  # noqa: F401 (fixture)


def _inventory(sim, tmp_path: Path, known_hosts: Path, **defaults) -> Path:
    data = yaml.safe_load(Path(sim.yaml_path).read_text())
    data["defaults"]["known_hosts"] = str(known_hosts)
    data["defaults"].pop("strict_host_key_checking", None)  # the default must be strict
    data["defaults"].update(defaults)
    p = tmp_path / "inventory.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_default_is_strict_everywhere():
    c = Cluster.from_dict({"nodes": [{"name": "n1", "host": "10.0.0.1"}]})
    assert c.node("n1").strict_host_key_checking is True
    conn = Cluster.from_connections([{"conn_id": "n1", "host": "10.0.0.1", "extra": {}}])
    assert conn.node("n1").strict_host_key_checking is True
    opt_out = Cluster.from_connections([{"conn_id": "n1", "host": "10.0.0.1", "extra": {"no_host_key_check": True}}])
    assert opt_out.node("n1").strict_host_key_checking is False
    with pytest.raises(RemoteError, match="strict_host_key_checking must be true/false"):
        Cluster.from_dict({"nodes": [{"name": "n1", "host": "h", "strict_host_key_checking": "maybe"}]})


@pytest.mark.cluster
def test_unknown_host_key_refused(fault_sim, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    c = Cluster.from_yaml(_inventory(fault_sim, tmp_path, empty))
    with SSHPool(c) as pool, pytest.raises(RemoteError, match=r"node node1: .*host key not in known_hosts"):
        pool.run("node1", "true")
    assert empty.read_text() == ""  # nothing was learnt


@pytest.mark.cluster
def test_changed_host_key_refused(fault_sim, tmp_path):
    sim = fault_sim
    n = sim.node("node1")
    fake = paramiko.Ed25519Key.from_private_key_file(str(sim.key_file))  # any ed25519 key but the node's
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[{n.host}]:{n.port} ssh-ed25519 {fake.get_base64()}\n")
    c = Cluster.from_yaml(_inventory(sim, tmp_path, kh))
    with SSHPool(c) as pool, pytest.raises(RemoteError, match=r"node node1: host key does not match known_hosts"):
        pool.run("node1", "true")


@pytest.mark.cluster
def test_explicit_opt_out_connects_without_learning(fault_sim, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    c = Cluster.from_yaml(_inventory(fault_sim, tmp_path, empty, strict_host_key_checking=False))
    with SSHPool(c) as pool:
        assert pool.run("node1", "echo $DLPERF_NODE").stdout.strip() == "node1"
    assert empty.read_text() == ""


@pytest.mark.cluster
def test_sweep_against_unknown_host_fails_before_any_trial(fault_sim, tmp_path):
    sim = fault_sim
    kh = tmp_path / "known_hosts"
    shutil.copy(sim.known_hosts, kh)
    n3 = sim.node("node3")
    kh.write_text("".join(line for line in kh.read_text().splitlines(keepends=True)
                          if not line.startswith(f"[{n3.host}]:")))  # node3's key is unknown
    suite = sim_suite(tmp_path, "pytorch-bert", "hostkey", {"1n1g": 100.0})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    out = tmp_path / "out"
    with pytest.raises(RemoteError, match=r"node node3: .*host key not in known_hosts") as err:
        run_sweep(suite, p, Cluster.from_yaml(_inventory(sim, tmp_path, kh)), out,
                  SweepOptions(progress=None, nodes=["node3"], capture_env=False, run_id="fault-hostkey"))
    assert n3.host not in str(err.value)  # names the node, not its address
    assert not (out / "trials").exists()
    assert leftovers(sim, "fault-hostkey") == []
