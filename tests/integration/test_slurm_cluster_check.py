"""`dlperf cluster check` on a Slurm cluster file, against the real test Slurm (scripts/testslurm,
docs/slurm.md): one line per finding, one FAIL line per problem naming the field, and a bad partition,
account or QoS stops before anything is submitted. Only the GPUs (gres on /dev/null-like devices) and
pyxis (the test-only SPANK stand-in) are simulated."""

import re

import pytest
import yaml

from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.slurm_check import validate_before_submit
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.remote.ssh import SSHPool

pytestmark = [pytest.mark.cluster, pytest.mark.slurm]


def _variant(c, tmp_path, **slurm) -> str:
    data = yaml.safe_load(c.yaml_path.read_text())
    data["slurm"].update(slurm)
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _check(path, capsys) -> tuple[int, list[str]]:
    rc = main(["cluster", "check", "--cluster", str(path)])
    return rc, capsys.readouterr().out.splitlines()


def _next_job_id(c) -> str:
    """The id the next submitted job would get: unchanged = nothing was submitted."""
    return next(ln.split("=")[1].strip() for ln in c.run("scontrol", "show", "config").stdout.splitlines()
                if ln.startswith("NEXT_JOB_ID"))


def test_check_passes_on_the_test_cluster(slurm_cluster_clean, capsys):
    rc, lines = _check(slurm_cluster_clean.yaml_path, capsys)
    assert rc == 0, lines
    assert lines[0].startswith("ok    login: login: reachable (slurm-wlm 22.05.8)")
    assert "ok    slurm.partition: gpu: 4 node(s)" in lines
    assert "ok    slurm.qos: bench: allowed" in lines
    # the image in this worker's registry (127.0.0.1:5000 for gw0, 5950+N for worker gwN)
    assert any(re.match(r"ok    slurm\.container \(pyxis\): a step in 127\.0\.0\.1:\d+#nvidia/", ln)
               and ln.endswith(": ran") for ln in lines), lines
    assert lines[-1] == "testslurm: ok"


@pytest.mark.parametrize("change,fail", [
    ({"partition": "nosuch"}, "FAIL  slurm.partition: partition 'nosuch' does not exist on the cluster "
                              "(sinfo lists: debug, gpu)"),
    ({"account": "nosuch"}, "FAIL  slurm.account: account 'nosuch' does not exist on the cluster"),
    ({"qos": "restricted"}, "FAIL  slurm.qos: QoS 'restricted' is not allowed for account dlperf "
                            "(allowed: bench, normal)"),
    ({"qos": "nosuch"}, "FAIL  slurm.qos: QoS 'nosuch' does not exist on the cluster"),
    ({"reservation": "nosuch"}, "FAIL  slurm.reservation: reservation 'nosuch' does not exist on the cluster"),
    ({"gpus_per_node": 16}, "FAIL  slurm.gpus_per_node: 16, but partition gpu has nodes with fewer GPUs (gres): "
                            "node1 gpu:8, node2 gpu:8, node3 gpu:8, node4 gpu:8"),
    ({"work_dir": "/nonexistent/dlperf"}, "FAIL  slurm.work_dir: /nonexistent/dlperf is not a writable directory "
                                          "on the login node"),
])
def test_each_problem_is_one_fail_line_and_nothing_is_submitted(slurm_cluster_clean, tmp_path, capsys, change, fail):
    c = slurm_cluster_clean
    before = _next_job_id(c)
    rc, lines = _check(_variant(c, tmp_path, **change), capsys)
    assert rc == 1
    assert [ln for ln in lines if ln.startswith("FAIL")] == [fail]
    assert lines[-1] == "testslurm: 1 problem(s)"
    assert not any("slurm.container" in ln for ln in lines)       # no srun with a bad setting
    assert _next_job_id(c) == before and c.jobs() == []


def test_an_image_that_cannot_be_imported_fails_the_container_line(slurm_cluster_clean, tmp_path, capsys):
    c = slurm_cluster_clean
    rc, lines = _check(_variant(c, tmp_path, check_image="127.0.0.1:5000/nvidia/nosuch:1"), capsys)
    fails = [ln for ln in lines if ln.startswith("FAIL")]
    assert rc == 1 and len(fails) == 1, lines
    assert fails[0].startswith("FAIL  slurm.container (pyxis): a step in 127.0.0.1:5000#nvidia/nosuch:1 through "
                               "pyxis failed (exit 1): ")
    assert "pyxis: failed to start a container of 127.0.0.1:5000#nvidia/nosuch:1" in fails[0]


def test_unknown_login_host_key_is_one_fail_line(slurm_cluster_clean, tmp_path, capsys):
    c = slurm_cluster_clean
    data = yaml.safe_load(c.yaml_path.read_text())
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    data["login"][0]["known_hosts"] = str(empty)
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    rc, lines = _check(path, capsys)
    assert rc == 1
    assert len(lines) == 2 and lines[0].startswith("FAIL  login: login: ") and "known_hosts" in lines[0], lines


def test_validate_before_submit_is_one_error_naming_file_and_field(slurm_cluster_clean, tmp_path):
    c = slurm_cluster_clean
    before = _next_job_id(c)
    for change, field in (({"account": "nosuch"}, "slurm.account"), ({"partition": "nosuch"}, "slurm.partition")):
        path = _variant(c, tmp_path, **change)
        cluster = SlurmCluster.from_yaml(path)
        with SSHPool(cluster.login_cluster()) as pool, pytest.raises(RemoteError) as exc:
            validate_before_submit(cluster, pool)
        assert str(exc.value).startswith(f"{path}: {field}: ") and "\n" not in str(exc.value)
    good = SlurmCluster.from_yaml(c.yaml_path)
    with SSHPool(good.login_cluster()) as pool:
        validate_before_submit(good, pool)
    assert _next_job_id(c) == before and c.jobs() == []


def test_killed_slurmd_shows_not_responding_and_the_check_names_it(slurm_cluster_clean, sim_cluster, capsys):
    """A node dies mid-job (its slurmd, steps and containers killed): sinfo shows it not responding,
    the check names it, and its job ends NODE_FAIL with no container left."""
    c = slurm_cluster_clean
    image = sim_cluster.image("pytorch:20.06-py3").replace("/", "#", 1)
    sub = c.ssh(f"cd {c.shared} && sbatch --parsable -p {c.partition} -w node4 -N1 --exclusive --wrap "
                f"'srun --container-image={image} --no-container-mount-home sleep 300'")
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    c.wait_job(job_id, "RUNNING")
    c.wait_containers(lambda ids: len(ids) == 1, timeout=60)
    with c.slurmd_killed("node4"):
        assert c.containers() == []
        state = c.wait_node("node4", lambda s: s.endswith("*") or s.startswith("down"), timeout=90)
        assert c.node_states()["node3"] == "idle"      # only that node
        rc, lines = _check(c.yaml_path, capsys)
        named = [ln for ln in lines if ln.startswith("ok    nodes: node4 is ")]
        assert len(named) == 1 and state.rstrip("*") in named[0], lines
        assert rc == 0        # three nodes are still usable: named, not fatal
        assert c.wait_sacct(job_id, timeout=90)["state"] == "NODE_FAIL"
    assert c.node_states()["node4"] == "idle"
