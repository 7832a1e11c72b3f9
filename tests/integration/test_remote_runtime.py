"""Container runtime command builders: the seeds' docker run flags, labels, conditional
--gpus/--device, and hostile values arriving literally on a real sshd (an argv printer stands
in for the docker binary here; the real docker is exercised in tests/integration)."""

from __future__ import annotations

import json
import sys

import pytest

from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.frameworks.base import LaunchSpec
from dlperf_tasks.core.model import Cell, Trial
from dlperf_tasks.remote import runtime as rt
from dlperf_tasks.remote.inventory import Cluster, Node
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.core.topology import Topology
from tests.fixtures.sshd_nodes import make_nodes, stop_nodes

HOSTILE = ["a b", "$(touch /tmp/dlperf_pwned_rt)", "`id`", "x;y", "it's", 'q"', "*", "$HOME", "new\nline"]
TRIAL = Trial(Cell("s", "pytorch_bert", "bert", "fp32", 32, Topology.parse("2n8g")), 1)
SPEC = ContainerSpec(image="nvcr.io/nvidia/pytorch:20.06-py3", mounts=("${data_dir}:/datasets:ro",),
                     devices=("/dev/infiniband",), cap_add=("IPC_LOCK",))
NODE = Node("node1", "10.0.0.1", data_dir="/data/x", workdir="/w")


def argv_of(facts, spec=SPEC, **kw):
    return rt.docker_run_argv(spec, spec.image, "n", {"dlperf.run": "r"}, node=NODE, facts=facts,
                              env_file="/dev/stdin", workdir="/ws", command=["python3", "x.py"], **kw)


def test_seed_flags_and_conditional_gpu_ib():
    bare = argv_of(rt.NodeFacts("node1"))
    assert bare[:4] == ["docker", "run", "--rm", "--name"]
    for flag in ("--shm-size=16g", "--net=host", "--ipc=host", "--cap-add=IPC_LOCK"):
        assert flag in bare
    assert bare[bare.index("--ulimit") + 1] == "memlock=-1"
    assert "--gpus" not in bare and "--device=/dev/infiniband" not in bare and "--privileged" not in bare
    assert "/data/x:/datasets:ro" in bare and bare[-3:] == [SPEC.image, "python3", "x.py"]
    full = argv_of(rt.NodeFacts("node1", nvidia_runtime=True, infiniband=True))
    assert full[full.index("--gpus") + 1] == "all" and "--device=/dev/infiniband" in full
    priv = argv_of(rt.NodeFacts("node1"), spec=ContainerSpec(image="i", privileged=True))
    assert "--privileged" in priv


def test_unknown_mount_placeholder_is_named():
    with pytest.raises(RemoteError, match=r"unknown placeholder \$\{dataset\}"):
        argv_of(rt.NodeFacts("node1"), spec=ContainerSpec(image="i", mounts=("${dataset}:/d",)))


def test_labels_and_names():
    d = rt.DockerRuntime(SPEC)
    cmd = d.node_command(LaunchSpec(["python3", "run.py"], {"K": "v"}, "/ws"), trial=TRIAL, run_id="run 1/x",
                         node=NODE, node_rank=0, facts=rt.NodeFacts("node1"), log_dir="/w/runs/r/t")
    argv = cmd.argv
    labels = [argv[i + 1] for i, a in enumerate(argv) if a == "--label"]
    assert labels == ["dlperf.run=run 1/x", f"dlperf.trial={TRIAL.key}", "dlperf.node=node1"]
    name = argv[argv.index("--name") + 1]
    assert name.startswith("dlperf-run-1-x-") and "node1" in name and " " not in name
    # the container's env travels as the job's stdin (docker --env-file /dev/stdin), never in argv
    assert cmd.stdin == f"K=v\nDLPERF_TRIAL={TRIAL.key}\nDLPERF_OUT=/dlperf/out\n".encode()
    assert argv[argv.index("--env-file") + 1] == "/dev/stdin" and "-e" not in argv and "K=v" not in argv
    assert cmd.env == {"DLPERF_TRIAL": TRIAL.key}  # the docker client's own env: the trial marker only
    assert cmd.mkdirs == ("/w/runs/r/t",)


def test_container_env_values_that_docker_cannot_take_are_refused():
    assert rt.docker_env_file({"A": "x y\t'$(id)'", "B": ""}) == b"A=x y\t'$(id)'\nB=\n"
    for bad in ("two\nlines", "cr\r", "nul\x00"):
        with pytest.raises(RemoteError, match="environment variable V: .*line break or NUL"):
            rt.docker_env_file({"V": bad})
    with pytest.raises(RemoteError, match="invalid environment variable name"):
        rt.docker_env_file({"A B": "1"})
    assert rt.remove_containers_command("r", TRIAL.key, "node1").count("label=") == 3


def test_parse_digest():
    out = '["127.0.0.1:5000/nvidia/pytorch@sha256:abc"] sha256:ffff'
    assert rt.parse_digest(out, "127.0.0.1:5000/nvidia/pytorch:20.06-py3") == "127.0.0.1:5000/nvidia/pytorch@sha256:abc"
    assert rt.parse_digest("[] sha256:ffff", "local:1") == "sha256:ffff"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    nodes, path = make_nodes(tmp_path_factory.mktemp("sshd"), 1, base_octet=91)
    yield nodes[0], Cluster.from_yaml(path)
    stop_nodes(nodes)


def test_hostile_values_arrive_literally_over_ssh(node, tmp_path):
    """Every argv element and env value of a LaunchSpec reaches the (stand-in) docker binary as is:
    argv words in its argv, env values in the env file it reads (``--env-file /dev/stdin``)."""
    from dlperf_tasks.remote import jobs

    lnode, cluster = node
    bindir = tmp_path / "bin"
    bindir.mkdir()
    printer = bindir / "docker"
    printer.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                       "env = open(sys.argv[sys.argv.index('--env-file') + 1]).read()\n"
                       "print(json.dumps({'argv': sys.argv[1:], 'env': dict(l.split('=', 1) for l in env.splitlines()),"
                       " 'trial': os.environ.get('DLPERF_TRIAL')}))\n")
    printer.chmod(0o755)
    d = rt.DockerRuntime(ContainerSpec(image="img:1", mounts=("${workdir}/in:/in",)))
    spec = LaunchSpec(["python3", "-c", "x"] + HOSTILE, {"E1": HOSTILE[1], "E2": HOSTILE[-2]}, workdir="/ws dir")
    cmd = d.node_command(spec, trial=TRIAL, run_id="r$(id)", node=cluster.node("node1"), node_rank=0,
                         facts=rt.NodeFacts("node1"), log_dir=str(lnode.workdir / "logs x"))
    assert cmd.argv[0] == "docker"
    cmd = jobs.JobCommand([str(printer), *cmd.argv[1:]], cmd.env, cmd.cwd, cmd.mkdirs, cmd.stdin)
    with SSHPool(cluster) as pool:
        job = jobs.start_job(pool, "node1", cmd, jobs.new_job_id("rt"))
        import time

        deadline = time.monotonic() + 10
        while jobs.exit_code(pool, job) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert jobs.exit_code(pool, job) == 0, jobs.read_log(pool, job, 0)
        got = json.loads(jobs.read_log(pool, job, 0))
        jobs.remove_job_dir(pool, job)
    argv = got["argv"]
    assert argv[-len(HOSTILE):] == HOSTILE
    assert got["env"]["E1"] == HOSTILE[1] and got["env"]["E2"] == HOSTILE[-2]
    assert got["env"]["DLPERF_TRIAL"] == got["trial"] == TRIAL.key
    assert not any(HOSTILE[1] in a and a.startswith("E1") for a in argv)
    assert argv[argv.index("-w") + 1] == "/ws dir"
    assert "dlperf.run=r$(id)" in argv
    assert f"{lnode.workdir}/in:/in" in argv
    assert (lnode.workdir / "logs x").is_dir()
    import os

    assert not os.path.exists("/tmp/dlperf_pwned_rt")


def test_trial_process_check_finds_tagged_processes(node):
    """The /proc scan sees a process carrying DLPERF_TRIAL=<key> and nothing once it is gone."""
    _, cluster = node
    import subprocess as sp

    proc = sp.Popen(["sleep", "30"], env={"DLPERF_TRIAL": "k123", "PATH": "/usr/bin:/bin"})
    try:
        with SSHPool(cluster) as pool:
            found = rt.HostRuntime().leftovers(pool, "node1", "r", "k123")
            assert found == [f"process {proc.pid}"]
            assert rt.HostRuntime().leftovers(pool, "node1", "r", "k12") == []
            proc.kill()
            proc.wait()
            assert rt.HostRuntime().finish(pool, "node1", "r", "k123") == []
    finally:
        proc.kill()


def test_container_names_of_runs_with_a_long_common_prefix_differ():
    """Run ids of one suite started within the same hour share their first 24 characters."""
    d = rt.DockerRuntime(SPEC)
    a = d.container_name("pytorch-bert-20261122T0801-aaaaaa", TRIAL, "node1", 1)
    b = d.container_name("pytorch-bert-20261122T0801-bbbbbb", TRIAL, "node1", 1)
    assert a != b and len(a) <= 128 and len(b) <= 128
