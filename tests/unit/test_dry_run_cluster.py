"""``dlperf sweep --dry-run --cluster INVENTORY`` prints the commands a real sweep would run on
each named node (one builder: remote.trial.trial_commands), refuses a missing inventory or a topology it
cannot fit, and masks secret-looking environment values."""

from __future__ import annotations

import pytest

from dlperf_tasks.cli import main
from dlperf_tasks.cli._dryrun import render
from dlperf_tasks.remote.jobs import JobCommand

INVENTORY = """
name: pod4
defaults: {user: bench, key_file: /nonexistent/id_ed25519, gpus: 8, interface: ib0, workdir: /var/tmp/dlperf,
           data_dir: /data, strict_host_key_checking: false}
nodes:
  - {name: gpu-a, host: 10.9.0.11}
  - {name: gpu-b, host: 10.9.0.12}
  - {name: gpu-c, host: 10.9.0.13}
  - {name: gpu-d, host: 10.9.0.14}
"""


@pytest.fixture
def inventory(tmp_path):
    p = tmp_path / "pod4.yaml"
    p.write_text(INVENTORY)
    return p


def _dry(capsys, *args):
    rc = main(["sweep", "--dry-run", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_per_node_container_commands_on_the_named_nodes(inventory, capsys):
    rc, out, _ = _dry(capsys, "--suite", "pytorch-bert", "--cluster", str(inventory), "--topologies", "4n8g",
                      "--batch-sizes", "96", "--precisions", "amp", "--trials", "1")
    assert rc == 0
    lines = [l for l in out.splitlines() if "/4n8g/t1 " in l]
    assert len(lines) == 8  # two cells (ga22, ga1) x four nodes: one torch.distributed.launch per node
    for rank, node in enumerate(["gpu-a", "gpu-b", "gpu-c", "gpu-d"]):
        (line,) = [l for l in lines if "/ga22/" in l and f" {node} (node rank {rank})" in l]
        assert "docker run" in line and "nvcr.io/nvidia/pytorch:20.06-py3" in line
        assert "--master_addr=10.9.0.11" in line and f"--node_rank={rank}" in line
        assert "NCCL_SOCKET_IFNAME=ib0" in line and "--gradient_accumulation_steps=22" in line
    assert "127.0.0.1" not in out and "local runtime" not in out
    assert out.startswith("suite pytorch-bert") and "cluster pod4 (4 nodes)" in out


def test_mpi_suite_starts_from_rank_0_only(inventory, capsys):
    rc, out, _ = _dry(capsys, "--suite", "mxnet-bert", "--cluster", str(inventory), "--topologies", "2n8g",
                      "--batch-sizes", "32", "--trials", "1")
    assert rc == 0
    lines = [l for l in out.splitlines() if "/2n8g/t1 " in l and "MPI sshd container" not in l]
    assert len(lines) == 1 and " gpu-a (node rank 0)" in lines[0] and "docker run" in lines[0]
    # mpirun reaches node 2's ranks through an sshd container started on every node first, and every
    # container runs the suite's source patch (catalog/patches.py) before its command
    sshd = [l for l in out.splitlines() if "/2n8g/t1 " in l and "MPI sshd container" in l]
    assert [l.split(" (node rank")[0].rsplit(" ", 1)[1] for l in sshd] == ["gpu-a", "gpu-b"]
    for line in sshd + lines:
        assert "dlperf_patch.py --root /workspace/gluon-nlp /dlperf/catalog/gluon-nlp-7b7bf60-dlperf-bert.diff --" in line
    assert "mpirun -x DLPERF_PATCHES_APPLIED" in lines[0] and "--data '/datasets/bert/mxnet/wiki_128_npy_part_0/*'" in lines[0]


def test_missing_inventory_is_refused(tmp_path, capsys):
    rc, out, err = _dry(capsys, "--suite", "pytorch-bert", "--cluster", str(tmp_path / "nope.yaml"))
    assert rc == 2 and "cannot read cluster inventory" in err and "nope.yaml" in err
    assert out == ""  # nothing printed before the refusal


def test_topology_the_inventory_cannot_fit_is_refused(tmp_path, capsys):
    p = tmp_path / "small.yaml"
    p.write_text(INVENTORY.replace("  - {name: gpu-c, host: 10.9.0.13}\n  - {name: gpu-d, host: 10.9.0.14}\n", ""))
    rc, out, err = _dry(capsys, "--suite", "pytorch-bert", "--cluster", str(p), "--topologies", "4n8g")
    # the check the DAG's plan step and a real sweep run (engine.clusterconf.check_fits), in one line
    assert rc == 2 and err.strip().splitlines()[-1] == "dlperf: error: topologies: 4n8g needs 4 nodes; cluster pod4 has 2"
    assert out == ""


def test_secret_looking_values_are_masked():
    cmd = JobCommand(["docker", "run", "img"], {"DLPERF_TRIAL": "k1", "REGISTRY_PASSWORD": "hunter2"},
                     stdin=b"NCCL_SOCKET_IFNAME=ib0\nHF_TOKEN=abc123\n")
    line = render(cmd)
    assert "hunter2" not in line and "abc123" not in line
    assert "REGISTRY_PASSWORD=***" in line and "HF_TOKEN=***" in line and "NCCL_SOCKET_IFNAME=ib0" in line
