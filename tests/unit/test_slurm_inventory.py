"""The Slurm cluster file (remote/slurm_inventory.py) and the pure parts of its check (remote/slurm_check.py):
every bad field is one line naming the file and the field."""

import shlex
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.slurm_check import container_step
from dlperf_tasks.remote.slurm_jobs import gpu_count
from dlperf_tasks.remote.slurm_inventory import (SlurmCluster, enroot_uri, format_time_limit, load_cluster,
                                                 parse_time_limit, scheduler_of)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slurm-cluster.yaml"
GOOD = {
    "name": "t", "scheduler": "slurm",
    "login": {"host": "login1.example.org", "user": "bench", "key_file": "/k"},
    "slurm": {"partition": "gpu", "account": "acc", "qos": "normal", "time_limit": "00:30:00", "gpus_per_node": 8,
              "work_dir": "/shared/dlperf", "container": "pyxis"},
}


def _write(tmp_path, data) -> Path:
    p = tmp_path / "slurm.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_example_file_loads_and_holds_no_secret():
    c = load_cluster(EXAMPLE)
    assert isinstance(c, SlurmCluster) and c.name == "superpod"
    assert c.login_names == ["login1", "login2"]
    assert [n.host for n in c.login] == ["login1.example.org", "login2.example.org"]
    assert all(n.strict_host_key_checking and n.key_file.endswith("/.ssh/id_ed25519") for n in c.login)
    s = c.slurm
    assert (s.partition, s.account, s.qos, s.reservation, s.gpus_per_node, s.container, s.mpi) == (
        "batch", "dl-bench", "normal", None, 8, "pyxis", "pmix")
    assert s.sbatch_options() == ["--partition=batch", "--account=dl-bench", "--qos=normal", "--time=0-00:30:00"]
    assert "password" not in EXAMPLE.read_text().replace("# ", "")
    assert "## `slurm-cluster.yaml`" in (ROOT / "examples" / "README.md").read_text()
    assert c.public_dict() == {"name": "superpod", "scheduler": "slurm", "partition": "batch", "gpus_per_node": 8,
                               "container": "pyxis"}


@pytest.mark.parametrize("text,seconds", [
    ("30", 1800), (45, 2700), ("10:30", 630), ("01:00:00", 3600), ("1-00", 86400), ("1-02:03", 93780),
    ("2-00:00:05", 172805),
])
def test_time_limit_takes_slurms_forms(text, seconds):
    assert parse_time_limit(text, "f: slurm.time_limit") == seconds


@pytest.mark.parametrize("bad", ["abc", "0", "1:2:3:4", True, "-5", "00:00:00"])
def test_bad_time_limit_is_one_line_naming_the_field(bad):
    with pytest.raises(RemoteError, match=r"^f: slurm.time_limit: ") as exc:
        parse_time_limit(bad, "f: slurm.time_limit")
    assert "\n" not in str(exc.value)


def test_format_time_limit_round_trips():
    for s in (60, 3600, 93784):
        assert parse_time_limit(format_time_limit(s), "x") == s


@pytest.mark.parametrize("change,field,words", [
    ({"slurm": {**GOOD["slurm"], "partition": None}}, "slurm.partition", "missing"),
    ({"slurm": {**GOOD["slurm"], "partition": "gpu;rm -rf"}}, "slurm.partition", "not a Slurm name"),
    ({"slurm": {**GOOD["slurm"], "account": "a b"}}, "slurm.account", "not a Slurm name"),
    ({"slurm": {**GOOD["slurm"], "qos": "$(x)"}}, "slurm.qos", "not a Slurm name"),
    ({"slurm": {**GOOD["slurm"], "container": "docker"}}, "slurm.container", "pyxis, apptainer, singularity, none"),
    ({"slurm": {**GOOD["slurm"], "work_dir": "rel/dir"}}, "slurm.work_dir", "absolute path"),
    ({"slurm": {**GOOD["slurm"], "work_dir": None}}, "slurm.work_dir", "missing"),
    ({"slurm": {**GOOD["slurm"], "gpus_per_node": "eight"}}, "slurm.gpus_per_node", "whole number"),
    ({"slurm": {**GOOD["slurm"], "max_in_flight": 0}}, "slurm.max_in_flight", "at least 1"),
    ({"slurm": {**GOOD["slurm"], "time_limit": "soon"}}, "slurm.time_limit", "not a Slurm time"),
    ({"slurm": {**GOOD["slurm"], "mpi": "openmpi"}}, "slurm.mpi", "pmix, pmi2, none"),
    ({"slurm": {**GOOD["slurm"], "exclude": ["n1", "n 2"]}}, "slurm.exclude", "node names"),
    ({"slurm": {**GOOD["slurm"], "partiton": "gpu"}}, "slurm", "unknown key(s) ['partiton']"),
    ({"slurm": None}, "slurm", "must be a mapping"),
    ({"login": None}, "login", "login host"),
    ({"login": [{"user": "x"}]}, "login[0].host", "missing"),
    ({"login": [{"host": "a;b"}]}, "login[0]", "invalid host"),
    ({"login": [{"host": "h", "colour": 1}]}, "login[0]", "unknown key(s) ['colour']"),
    ({"registry": {"server": "nvcr.io", "password_env": "X"}}, "registry", "credentials are the site's"),
    ({"nodes": [{"name": "n", "host": "h"}]}, "nodes", "login hosts"),
    ({"colour": "blue"}, "unknown key(s) ['colour']", ""),
])
def test_each_bad_field_is_one_line_naming_file_and_field(tmp_path, change, field, words):
    path = _write(tmp_path, {**GOOD, **change})
    with pytest.raises(RemoteError) as exc:
        SlurmCluster.from_yaml(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: {field}"), msg
    assert words in msg and "\n" not in msg


def test_docker_loader_refuses_a_slurm_file_in_one_line(tmp_path):
    path = _write(tmp_path, GOOD)
    with pytest.raises(RemoteError, match=r"scheduler: 'slurm' is not a Docker-over-SSH cluster") as exc:
        Cluster.from_yaml(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)
    assert scheduler_of(path) == "slurm"
    assert scheduler_of(ROOT / "examples" / "cluster.yaml") == "docker"
    assert isinstance(load_cluster(ROOT / "examples" / "cluster.yaml"), Cluster)
    bad = _write(tmp_path, {**GOOD, "scheduler": "pbs"})
    with pytest.raises(RemoteError, match=r"scheduler: must be 'docker' or 'slurm', got 'pbs'"):
        scheduler_of(bad)


def test_login_hosts_follow_the_node_ssh_rules(tmp_path):
    c = SlurmCluster.from_yaml(_write(tmp_path, {**GOOD, "defaults": {"port": 2222, "strict_host_key_checking": False},
                                                 "login": [{"host": "a"}, {"host": "b", "name": "second"}]}))
    assert [(n.name, n.host, n.port, n.strict_host_key_checking, n.gpus) for n in c.login] == [
        ("login1", "a", 2222, False, 0), ("second", "b", 2222, False, 0)]
    pool_view = c.login_cluster()
    assert pool_view.names == ["login1", "second"]


@pytest.mark.parametrize("ref,uri", [
    ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
    ("127.0.0.1:5000/nvidia/pytorch:20.06-py3", "127.0.0.1:5000#nvidia/pytorch:20.06-py3"),
    ("localhost/x:1", "localhost#x:1"),
    ("nvidia/cuda:12.4.1-base", "nvidia/cuda:12.4.1-base"),
    ("ubuntu", "ubuntu"),
    ("nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, "nvcr.io#nvidia/pytorch@sha256:" + "a" * 64),
])
def test_enroot_uri(ref, uri):
    assert enroot_uri(ref) == uri


@pytest.mark.parametrize("gres,count", [
    ("gpu:8", 8), ("gpu:a100:4(S:0-1)", 4), ("gpu:a100:4,gpu:v100:4", 8), ("(null)", 0), ("gpu:h100:8(S:0),nic:2", 8),
    ("mps:100", 0),
])
def test_gpu_count_from_sinfo_gres(gres, count):
    assert gpu_count(gres) == count


def test_check_step_per_container_mode(tmp_path):
    c = SlurmCluster.from_yaml(_write(tmp_path, {**GOOD, "images": ["127.0.0.1:5000/nvidia/pytorch:20.06-py3"]}))
    cmd, what = container_step(c, "nvcr.io/nvidia/pytorch:20.06-py3")       # the cluster's mirror is used
    argv = shlex.split(cmd.split(" && ", 1)[1])
    assert cmd.startswith("cd /shared/dlperf && ")
    assert argv[:4] == ["srun", "--partition=gpu", "--account=acc", "--qos=normal"]
    assert "--container-image=127.0.0.1:5000#nvidia/pytorch:20.06-py3" in argv and argv[-1] == "true"
    assert "--no-container-mount-home" in argv and "--gpus-per-node=8" in argv and "--immediate=60" in argv
    for mode, tail in (("apptainer", ["apptainer", "--version"]), ("none", ["true"])):
        m = SlurmCluster.from_yaml(_write(tmp_path, {**GOOD, "slurm": {**GOOD["slurm"], "container": mode}}))
        argv = shlex.split(container_step(m, None)[0].split(" && ", 1)[1])
        assert argv[-len(tail):] == tail and not any(a.startswith("--container") for a in argv)
    bare = SlurmCluster.from_yaml(_write(tmp_path, GOOD))
    assert container_step(bare, None) == (None, "no image to try: set slurm.check_image (or pass --image)")


class _ConfigOnlyLogin:
    """Answers the one command the account check sends first (``scontrol show config``) with the
    config lines of a Slurm that keeps no accounting (as Slurm 22.05 prints them); any other command
    would be a bug here: without accounting the check must not query sacctmgr."""

    def __init__(self):
        self.commands = []

    def run(self, name, command, timeout=None):
        from dlperf_tasks.remote.ssh import CommandResult

        self.commands.append(command)
        assert command == "scontrol show config", command
        return CommandResult(name, command, 0, "AccountingStorageType   = accounting_storage/none\n"
                                               "ClusterName             = c\n", "")


def test_account_without_accounting_says_it_is_not_checked(tmp_path):
    from dlperf_tasks.remote.slurm_check import account_findings

    c = SlurmCluster.from_yaml(_write(tmp_path, GOOD))
    pool = _ConfigOnlyLogin()
    [finding] = account_findings(c, pool, "login")
    assert finding.ok and finding.line() == (
        "ok    slurm.account: not checked: the cluster keeps no accounting "
        "(AccountingStorageType=accounting_storage/none); Slurm accepts any name")
    assert pool.commands == ["scontrol show config"]


def test_the_check_line_of_a_failed_pyxis_step_names_the_failure_not_the_import_notice():
    """pyxis prints ``pyxis: importing docker image`` before it fails (messages of NVIDIA/pyxis 0.24.0
    pyxis_slurmstepd.c; slurmstepd's own line last)."""
    from dlperf_tasks.remote.slurm_check import _one_line

    out = ("pyxis: importing docker image: nvcr.io#nvidia/nosuch:1\n"
           "slurmstepd: error: pyxis: failed to import docker image\n"
           "slurmstepd: error: Failed to invoke spank plugin stack\n")
    assert _one_line(out, about="pyxis:") == ("slurmstepd: error: pyxis: failed to import docker image | "
                                              "slurmstepd: error: Failed to invoke spank plugin stack")
    assert _one_line("pyxis: importing docker image: x\nsrun: error: node1: task 0: Exited with exit code 1\n",
                     about="pyxis:").startswith("pyxis: importing docker image: x | srun: error")
