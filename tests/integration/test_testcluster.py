"""The simulated cluster itself (scripts/testcluster, tests/fixtures/cluster.py).

Everything here is real: OpenSSH sshd per node, paramiko with host-key checking, dockerd,
Debian's docker-registry with htpasswd auth, the debootstrapped stand-in image. Nodes only
*claim* GPUs (no GPU is used anywhere).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import paramiko
import pytest

from dlperf_tasks.remote import jobs
from tests.fixtures.cluster import ROOT, SCRIPT, private_cluster_address

pytestmark = pytest.mark.cluster


def ssh_run(client: paramiko.SSHClient, command: str, timeout: float = 120) -> tuple[int, str, str]:
    _, out, err = client.exec_command(command, timeout=timeout)
    rc = out.channel.recv_exit_status()
    return rc, out.read().decode(), err.read().decode()


def _pgrep(pattern: str) -> list[str]:
    """``pgrep -af pattern``: every process on this machine (a simulated node's run here) whose
    command line matches, zombies aside (they have none)."""
    return subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True, timeout=30).stdout.splitlines()


def docker(*args: str, env: dict | None = None, input: str | None = None, timeout: float = 300):
    return subprocess.run(["docker", *args], capture_output=True, text=True, env=env, input=input, timeout=timeout)


def tc_cli(sim_cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--dir", str(sim_cluster.dir), *args],
                          capture_output=True, text=True, timeout=120)


def test_every_node_logs_in_as_root_with_its_own_host_key_and_docker(sim_cluster):
    assert len(sim_cluster.nodes) >= 4
    hostkeys = set()
    for node in sim_cluster.nodes:
        client = sim_cluster.ssh_client(node.name)
        try:
            hostkeys.add(client.get_transport().get_remote_server_key().get_base64())
            rc, out, err = ssh_run(client, "echo $DLPERF_NODE $DLPERF_NODE_GPUS; id -u; "
                                           "docker version --format '{{.Server.Version}}'")
            assert rc == 0, err
            lines = out.split("\n")
            assert lines[0] == f"{node.name} {node.gpus}"
            assert lines[1] == "0"
            assert lines[2].strip(), "docker server version is empty"
            assert Path(node.workdir).is_dir() and Path(node.data_dir).is_dir()
        finally:
            client.close()
    assert len(hostkeys) == len(sim_cluster.nodes), "every node must have its own host key"
    hosts = {(n.host, n.port) for n in sim_cluster.nodes}
    assert len(hosts) == len(sim_cluster.nodes) and all(h.startswith("127.") for h, _ in hosts)


def test_wrong_client_key_is_refused(sim_cluster, tmp_path):
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    with pytest.raises(paramiko.AuthenticationException):
        sim_cluster.ssh_client(sim_cluster.nodes[0].name, key_file=wrong)


def test_password_login_is_not_offered(sim_cluster):
    node = sim_cluster.nodes[0]
    transport = paramiko.Transport((node.host, node.port))
    try:
        transport.start_client(timeout=10)
        with pytest.raises(paramiko.BadAuthenticationType) as exc:
            transport.auth_password("root", "root")
        assert exc.value.allowed_types == ["publickey"]
    finally:
        transport.close()


def test_host_key_checking_rejects_unknown_and_mismatched_keys(sim_cluster, tmp_path):
    n1, n2 = sim_cluster.nodes[0], sim_cluster.nodes[1]
    # unknown host: empty known_hosts + RejectPolicy
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(n1.host, port=n1.port, username="root", key_filename=str(sim_cluster.key_file),
                       look_for_keys=False, allow_agent=False, timeout=10)
    client.close()
    # node2's key recorded under node1's address: a man-in-the-middle as far as ssh can tell
    lines = sim_cluster.known_hosts.read_text().splitlines()
    key2 = next(line for line in lines if line.startswith(f"[{n2.host}]:{n2.port} ")).split(" ", 1)[1]
    fake = tmp_path / "known_hosts"
    fake.write_text(f"[{n1.host}]:{n1.port} {key2}\n")
    client = paramiko.SSHClient()
    client.load_host_keys(str(fake))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(n1.host, port=n1.port, username="root", key_filename=str(sim_cluster.key_file),
                       look_for_keys=False, allow_agent=False, timeout=10)
    client.close()


def test_secrets_files_are_private_and_creds_not_in_yaml(sim_cluster):
    for f in (sim_cluster.env_file, sim_cluster.key_file):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    password = sim_cluster.env["DLPERF_REGISTRY_PASSWORD"]
    assert len(password) >= 20
    assert password not in sim_cluster.yaml_path.read_text()


def test_cluster_yaml_loads_with_the_inventory(sim_cluster_env):
    from dlperf_tasks.remote.inventory import Cluster

    cluster = Cluster.from_yaml(sim_cluster_env.yaml_path)
    assert cluster.names == [n.name for n in sim_cluster_env.nodes]
    node = cluster.node("node1")
    assert node.strict_host_key_checking is True
    assert node.known_hosts == str(sim_cluster_env.known_hosts)
    assert node.workdir == sim_cluster_env.node("node1").workdir
    assert cluster.registry.server == sim_cluster_env.registry
    assert cluster.registry.resolve_password() == sim_cluster_env.env["DLPERF_REGISTRY_PASSWORD"]


def test_registry_login_right_and_wrong_password(sim_cluster, docker_config):
    reg, user, pw = sim_cluster.registry, sim_cluster.env["DLPERF_REGISTRY_USER"], sim_cluster.env["DLPERF_REGISTRY_PASSWORD"]
    bad = docker("login", "-u", user, "--password-stdin", reg, input=pw + "x")
    assert bad.returncode != 0 and "401" in bad.stderr + bad.stdout
    unknown = docker("login", "-u", "nobody", "--password-stdin", reg, input=pw)
    assert unknown.returncode != 0
    ok = docker("login", "-u", user, "--password-stdin", reg, input=pw)
    assert ok.returncode == 0, ok.stderr
    assert reg in (docker_config / "config.json").read_text()


def test_pull_needs_login_and_gives_the_pushed_digest(sim_cluster, docker_config):
    ref = sim_cluster.image("pytorch:20.06-py3")
    assert ref == f"{sim_cluster.registry}/nvidia/pytorch:20.06-py3"
    anonymous = docker("pull", ref)
    assert anonymous.returncode != 0
    assert "no basic auth credentials" in anonymous.stderr or "unauthorized" in anonymous.stderr.lower()
    reg, user, pw = sim_cluster.registry, sim_cluster.env["DLPERF_REGISTRY_USER"], sim_cluster.env["DLPERF_REGISTRY_PASSWORD"]
    assert docker("login", "-u", user, "--password-stdin", reg, input=pw).returncode == 0
    for name in ("pytorch:20.06-py3", "nvidia/mxnet:20.03-py3", "tensorflow:20.03-tf1-py3"):
        pulled = docker("pull", sim_cluster.image(name))
        assert pulled.returncode == 0, pulled.stderr
        assert sim_cluster.state["digests"][sim_cluster.image(name)] in pulled.stdout
    with pytest.raises(KeyError, match="no image"):
        sim_cluster.image("pytorch:99.99-py3")


def _pull_from(client, sim_cluster, ref):
    """docker login + pull, run ON a node over ssh (as the remote code will do)."""
    env = sim_cluster.env
    cmd = (f"export DOCKER_CONFIG=$(mktemp -d) && "
           f"printf %s {shlex.quote(env['DLPERF_REGISTRY_PASSWORD'])} | "
           f"docker login -u {shlex.quote(env['DLPERF_REGISTRY_USER'])} --password-stdin {shlex.quote(sim_cluster.registry)} "
           f">/dev/null && docker pull -q {shlex.quote(ref)} && rm -rf \"$DOCKER_CONFIG\"")
    rc, out, err = ssh_run(client, cmd)
    assert rc == 0, err


def test_container_on_a_node_runs_python_mpirun_and_the_standin(sim_cluster):
    ref = sim_cluster.image("pytorch:20.12-py3")
    run_id = f"tc-{uuid.uuid4().hex[:8]}"
    client = sim_cluster.ssh_client("node2")
    try:
        _pull_from(client, sim_cluster, ref)
        script = ("python3 -c 'import sys; print(\"py\", sys.version_info[:2])'; mpirun --version | head -1; "
                  "test -x /usr/local/bin/dlperf-standin && "
                  "dlperf-standin --format pytorch_bert --speed 200 --iters 3 --time-scale 0.001; "
                  "python3 -c 'import torch.distributed.launch; print(\"launch-shim\")'")
        cmd = shlex.join(["docker", "run", "--rm", "--net=host", "--label", "dlperf.node=node2",
                          "--label", f"dlperf.run={run_id}", ref, "bash", "-c", script])
        rc, out, err = ssh_run(client, cmd)
    finally:
        client.close()
    assert rc == 0, err
    assert "py (3, 11)" in out
    assert "Open MPI" in out
    # the stand-in overlay (docker/standin/rootfs) is in the image and prints a training log
    assert (ROOT / "docker" / "standin" / "rootfs").is_dir()
    assert "launch-shim" in out
    assert len([line for line in out.splitlines() if line.strip()]) > 4, out
    assert not sim_cluster.containers(f"dlperf.run={run_id}")


@pytest.fixture(scope="module")
def fault_cluster(sim_cluster_factory):
    """A private 2-node cluster: killing nodes of the shared one would disturb other tests."""
    return sim_cluster_factory("tc-faults", nodes=2, net="127.0.11", registry_port=5011)


def test_private_cluster_is_separate(sim_cluster, fault_cluster):
    assert fault_cluster.dir != sim_cluster.dir
    name, net, port = private_cluster_address("tc-faults", "127.0.11", 5011)  # this worker's (gw0: as asked)
    assert (fault_cluster.state["name"], fault_cluster.registry) == (name, f"127.0.0.1:{port}")
    assert [n.host for n in fault_cluster.nodes] == [f"{net}.1", f"{net}.2"]
    assert fault_cluster.env["DLPERF_REGISTRY_PASSWORD"] != sim_cluster.env["DLPERF_REGISTRY_PASSWORD"]
    assert not fault_cluster.health()


def test_kill_node_takes_sessions_and_containers_and_revive_restores_it(fault_cluster):
    sim_cluster = fault_cluster
    node = sim_cluster.nodes[-1]
    ref = sim_cluster.image("mxnet:20.03-py3")
    run_id = f"tc-{uuid.uuid4().hex[:8]}"
    client = sim_cluster.ssh_client(node.name)
    try:
        _pull_from(client, sim_cluster, ref)
        # a long session command and a labelled container belonging to the node
        client.exec_command("sleep 300")
        rc, _, err = ssh_run(client, shlex.join(["docker", "run", "-d", "--rm", "--net=host",
                                                 "--label", f"dlperf.node={node.name}",
                                                 "--label", f"dlperf.testcluster={sim_cluster.state['name']}",
                                                 "--label", f"dlperf.run={run_id}", ref, "sleep", "300"]))
        assert rc == 0, err
        # a detached job as dlperf starts them (setsid: it leaves the session, its parent is init)
        paths = jobs.JobPaths(jobs.new_job_id("tc_detached"), jobs.jobs_base_dir(node.workdir))
        rc, out, err = ssh_run(client, jobs.start_command(paths, jobs.JobCommand(["sleep", "302"])) + " </dev/null")
        assert rc == 0 and out.strip() == f"started {paths.job_id}", err
        # the session's shell runs as "bash -c sleep 300" until it execs the command: wait for the command itself
        deadline = time.time() + 60
        while time.time() < deadline and not {"sleep 300", "sleep 302"} <= {c for _, c in sim_cluster.processes(node.name)}:
            time.sleep(0.1)
        running = sim_cluster.processes(node.name)
        assert {"sleep 300", "sleep 302"} <= {c for _, c in running}, running
        assert any(c.startswith("bash -c") and f"dlperf-job run {paths.job_dir}" in c for _, c in running), running
        assert sim_cluster.containers(f"dlperf.run={run_id}")[0]["Labels"]["dlperf.node"] == node.name

        proc = tc_cli(sim_cluster, "kill-node", node.name)
        assert proc.returncode == 0, proc.stderr
        assert not sim_cluster.node_is_up(node.name)
        with pytest.raises((paramiko.ssh_exception.NoValidConnectionsError, socket.error)):
            sim_cluster.ssh_client(node.name)
        assert sim_cluster.processes(node.name) == []  # the detached job too: a dead node runs nothing
        assert not [line for line in _pgrep("dlperf-job run") if paths.job_dir in line]
        assert not [c for c in sim_cluster.containers(f"dlperf.run={run_id}") if c["State"] == "running"]
        # other nodes are unaffected
        assert sim_cluster.node_is_up(sim_cluster.nodes[0].name)
        assert tc_cli(sim_cluster, "status").returncode == 1
    finally:
        client.close()
        sim_cluster.revive_node(node.name)
        docker("rm", "-f", *[c["ID"] for c in sim_cluster.containers(f"dlperf.run={run_id}")])
    assert sim_cluster.node_is_up(node.name)
    client = sim_cluster.ssh_client(node.name)  # same host key: known_hosts still matches
    try:
        assert ssh_run(client, "echo $DLPERF_NODE")[1].strip() == node.name
    finally:
        client.close()
    status = tc_cli(sim_cluster, "status")
    assert status.returncode == 0, status.stdout


def test_listener_only_kill_keeps_running_sessions(fault_cluster):
    sim_cluster = fault_cluster
    node = sim_cluster.nodes[-2]
    client = sim_cluster.ssh_client(node.name)
    try:
        with sim_cluster.node_killed(node.name, listener_only=True):
            with pytest.raises((paramiko.ssh_exception.NoValidConnectionsError, socket.error)):
                sim_cluster.ssh_client(node.name)
            rc, out, _ = ssh_run(client, "echo still-here")  # the open session still works
            assert rc == 0 and out.strip() == "still-here"
    finally:
        client.close()
    assert sim_cluster.node_is_up(node.name)


def test_cli_errors_are_clear(sim_cluster):
    proc = tc_cli(sim_cluster, "kill-node", "node99")
    assert proc.returncode == 2
    assert "unknown node 'node99'" in proc.stderr and "node1" in proc.stderr
    proc = tc_cli(sim_cluster, "up", "--nodes", "0")
    assert proc.returncode == 2 and "--nodes must be between 1 and 250" in proc.stderr


def test_up_again_is_fast_and_idempotent(sim_cluster):
    before = sim_cluster.known_hosts.read_text()
    t0 = time.time()
    proc = tc_cli(sim_cluster, "up", "--nodes", str(len(sim_cluster.nodes)))
    took = time.time() - t0
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sim_cluster.yaml_path)
    assert sim_cluster.known_hosts.read_text() == before  # host keys and creds are kept
    assert took < 30, f"warm `up` took {took:.1f} s"


def test_up_adopts_its_registry_when_the_state_lost_its_pid(sim_cluster):
    """A state file without the registry's pid (a lost update) must not leave `up` failing on its own
    registry's port: `up` finds the docker-registry serving this cluster's config and keeps it."""
    state_file = sim_cluster.dir / "state.json"
    state = json.loads(state_file.read_text())
    pid = state.pop("registry_pid")
    state_file.write_text(json.dumps(state))
    proc = tc_cli(sim_cluster, "up", "--nodes", str(len(sim_cluster.nodes)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(state_file.read_text())["registry_pid"] == pid


def test_setup_test_env_is_idempotent_and_fast():
    t0 = time.time()
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "setup-test-env.sh")], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "Debian packages: all" in proc.stdout
    assert "dockerd: running" in proc.stdout
    assert "weed: version" in proc.stdout
    assert time.time() - t0 < 30
    bad = subprocess.run(["bash", str(ROOT / "scripts" / "setup-test-env.sh"), "--bogus"], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "unknown option --bogus" in bad.stderr


def test_debian_mirror_is_read_from_apt_sources(tmp_path, monkeypatch):
    from tests.fixtures.cluster import tc

    monkeypatch.delenv("DLPERF_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert tc.debian_mirror(str(tmp_path)) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert tc.debian_mirror(str(tmp_path)) == "http://other.example/debian"
    (tmp_path / "sources.list").write_text("deb http://x.example/ubuntu jammy main\n")
    with pytest.raises(tc.ClusterError, match="no Debian bookworm mirror"):
        tc.debian_mirror(str(tmp_path))


def test_a_leftover_run_container_fails_the_session(sim_cluster, tmp_path):
    """The fixture's teardown check, in a real inner pytest session."""
    label = f"dlperf.run=leak-{uuid.uuid4().hex[:8]}"
    (tmp_path / "test_leak.py").write_text(
        "import subprocess\n"
        "def test_leak(sim_cluster):\n"
        "    subprocess.run(['docker', 'run', '-d', '--net=host', '--label', %r, '--label', 'dlperf.node=node1',\n"
        "                    '--label', %r, 'dlperf-testcluster/standin:latest', 'sleep', '120'], check=True)\n"
        % (label, f"dlperf.testcluster={sim_cluster.state['name']}"))
    # the inner session is no xdist worker: it uses this (the outer worker's) cluster through DLPERF_TESTCLUSTER_DIR
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update(PYTHONPATH=str(ROOT), DLPERF_TESTCLUSTER_DIR=str(sim_cluster.dir))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.fixtures.cluster", "-p", "no:cacheprovider",
                           str(tmp_path / "test_leak.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 passed, 1 error" in proc.stdout
    assert "labelled dlperf.run were left behind" in proc.stdout
    assert not sim_cluster.containers(label)
