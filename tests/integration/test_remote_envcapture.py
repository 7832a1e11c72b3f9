"""Environment capture: NCCL transport from real multi-node fixture logs; per-node capture on a
real sshd node without GPU tools (recorded as absent, never an error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf_tasks.remote import envcapture
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import HostRuntime
from dlperf_tasks.remote.ssh import SSHPool
from tests.fixtures.sshd_nodes import make_nodes, stop_nodes

DATA = Path(__file__).resolve().parents[1] / "data" / "fixture_logs"


def test_nccl_transport_from_fixture_log():
    log = DATA / "pytorch_bert/fp16_ngc_bert_b96/pytorch/2n8g/bert-base-adam-training_b96_fp16_1.log"
    with open(log, errors="replace") as f:
        t = envcapture.nccl_transport(f)
    assert t["network"] == "IB"
    assert t["paths"] == ["P2P/IPC"]  # this log holds node1's intra-node rings only


def test_nccl_transport_absent():
    assert envcapture.nccl_transport(["no nccl here\n"]) == {"network": "absent", "paths": []}
    sock = ["x NCCL INFO Using network Socket\n", "x NCCL INFO Channel 00 : 0[0] -> 1[0] [send] via NET/Socket/0\n"]
    assert envcapture.nccl_transport(sock) == {"network": "Socket", "paths": ["NET/Socket"]}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    nodes, path = make_nodes(tmp_path_factory.mktemp("sshd"), 1, base_octet=101)
    yield Cluster.from_yaml(path)
    stop_nodes(nodes)


def test_capture_without_gpu_tools_records_absent(node, monkeypatch):
    with SSHPool(node) as pool:
        env = envcapture.capture(pool, ["node1"], HostRuntime(), None, "abc123")
    n = env["nodes"]["node1"]
    assert n["gpus"] == "absent" and n["topo"] == "absent" and n["driver"] == "absent"
    assert n["cudnn"] == "absent" and n["nccl"] == "absent"
    assert n["python"].count(".") == 2
    assert env["upstream_commit"] == "abc123" and env["runtime"] == "host"
    assert "127.0." not in str(env)


def test_sweep_records_the_nccl_transport_of_multinode_trials(tmp_path):
    """The transport actually used comes from the trial's own NCCL_DEBUG=INFO lines (no GPU needed
    to test the reading: the lines are NCCL's real format); single-node trials are not scanned."""
    from dlperf_tasks.core.model import Cell, Trial, TrialResult, TrialStatus
    from dlperf_tasks.engine.sweep import nccl_transports
    from dlperf_tasks.core.topology import Topology

    def result(topo, rel, text):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        cell = Cell("pytorch-bert", "pytorch_bert", "bert-base", "amp", 96, Topology.parse(topo))
        return TrialResult(Trial(cell, 1), TrialStatus.OK, log_paths=[rel])

    ib = ("node1:77:90 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
          "node1:77:91 [0] NCCL INFO Channel 00 : 15[b2000] -> 0[1a000] [receive] via NET/IB/0\n")
    res = [result("2n8g", "logs/a/2n8g/x_1.log", ib),
           result("1n8g", "logs/a/1n8g/x_1.log", ib),
           result("4n8g", "logs/a/4n8g/x_1.log", "no nccl lines here\n")]
    found = nccl_transports(tmp_path, res)
    assert list(found) == [res[0].trial.id]
    assert found[res[0].trial.id]["network"] == "IB" and "NET/IB" in found[res[0].trial.id]["paths"]
