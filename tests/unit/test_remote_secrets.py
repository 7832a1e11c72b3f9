"""Secrets on the way to the nodes, checked on the pure builders: env values and
a container's env never in a command line, the registry password only on stdin, SSH key text and
passphrase from a connection or an environment variable kept out of repr/public data, a store
endpoint with credentials refused without echoing them. The same is checked on running
processes of the simulated cluster in tests/faults/test_security_secrets.py."""

from __future__ import annotations

import json
import shlex

import pytest

from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.core.errors import RemoteError, StoreError
from dlperf_tasks.frameworks.base import LaunchSpec
from dlperf_tasks.core.model import Cell, Trial
from dlperf_tasks.remote import jobs
from dlperf_tasks.remote import runtime as rt
from dlperf_tasks.remote.connections import with_ssh_connections
from dlperf_tasks.remote.inventory import Cluster, Node
from dlperf_tasks.core.topology import Topology

SECRET = "s3cr3t-" + "value-9f2c"
TRIAL = Trial(Cell("s", "pytorch_bert", "bert", "fp32", 32, Topology.parse("1n1g")), 1)
NODE = Node("node1", "10.0.0.1", workdir="/w")
KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" + SECRET + "\n" \
           "-----END OPENSSH PRIVATE KEY-----\n"


def _words(cmd: jobs.JobCommand, job_id: str = "j_1") -> str:
    """Everything that becomes a command line on the node: the start line (argv of the job)."""
    return jobs.start_command(jobs.JobPaths(job_id, "/w/jobs"), cmd)


@pytest.mark.parametrize("runtime", [rt.HostRuntime(), rt.DockerRuntime(ContainerSpec(image="img:1"))],
                         ids=["host", "docker"])
def test_env_values_never_in_a_command_line(runtime):
    spec = LaunchSpec(["python3", "train.py", "--lr", "1"], {"WANDB_API_KEY": SECRET, "OTHER": "x"}, "/ws")
    cmd = runtime.node_command(spec, trial=TRIAL, run_id="r1", node=NODE, node_rank=0,
                               facts=rt.NodeFacts("node1"), log_dir="/w/runs/r1/t")
    line = _words(cmd)
    assert SECRET not in line and SECRET not in " ".join(cmd.argv)
    payload = jobs.env_payload(cmd.env, cmd.stdin)  # goes over the SSH channel's stdin only
    assert SECRET.encode() in payload
    if isinstance(runtime, rt.DockerRuntime):
        assert f"WANDB_API_KEY={SECRET}\n".encode() in cmd.stdin
        assert cmd.argv[cmd.argv.index("--env-file") + 1] == "/dev/stdin"
    else:
        assert cmd.env["WANDB_API_KEY"] == SECRET


def test_registry_login_writes_nothing_on_the_node():
    """The login and pull go through the engine API with the credentials inside the request
    (remote/engine.py): no script, no DOCKER_CONFIG, no ``docker login`` on the node."""
    import inspect

    from dlperf_tasks.remote import engine

    src = inspect.getsource(engine)
    assert "auth_config=auth" in src and "DOCKER_CONFIG" not in src.split('"""', 2)[2]
    assert not hasattr(rt, "registry_pull_command") and not hasattr(rt, "REGISTRY_PULL_SCRIPT")
    assert "dlperf-docker-config.*" in rt.LEFTOVER_REGISTRY_CONFIG_CLEANUP  # older builds' leftovers go


def test_ssh_key_text_and_passphrase_from_the_environment(monkeypatch):
    monkeypatch.setenv("NODE_KEY", KEY_TEXT)
    monkeypatch.setenv("NODE_KEY_PASS", SECRET + "-pass")
    c = Cluster.from_dict({"defaults": {"private_key_env": "NODE_KEY", "private_key_passphrase_env": "NODE_KEY_PASS"},
                           "nodes": [{"name": "node1", "host": "10.0.0.1"}]})
    n = c.node("node1")
    assert n.private_key == KEY_TEXT and n.private_key_passphrase == SECRET + "-pass"
    for text in (repr(c), repr(n), str(c.public_dict())):
        assert SECRET not in text
    monkeypatch.delenv("NODE_KEY_PASS")
    with pytest.raises(RemoteError, match="private_key_passphrase_env names the environment variable 'NODE_KEY_PASS'"):
        Cluster.from_dict({"defaults": {"private_key_passphrase_env": "NODE_KEY_PASS"},
                           "nodes": [{"name": "node1", "host": "10.0.0.1"}]})


def test_ssh_key_from_a_connection_replaces_the_key_file():
    c = Cluster.from_dict({"defaults": {"key_file": "/k/id"},
                           "nodes": [{"name": "node1", "host": "10.0.0.1", "ssh_conn_id": "dlperf_node1"},
                                     {"name": "node2", "host": "10.0.0.2"}]})
    conns = {"dlperf_node1": {"login": "ops", "extra": '{"private_key": %s, "private_key_passphrase": "%s"}'
                              % (json.dumps(KEY_TEXT), SECRET)}}
    got = with_ssh_connections(c, conns.get)
    n1, n2 = got.node("node1"), got.node("node2")
    assert (n1.private_key, n1.private_key_passphrase, n1.user, n1.key_file) == (KEY_TEXT, SECRET, "ops", None)
    assert n2.key_file == "/k/id" and n2.private_key is None
    assert SECRET not in repr(got) and SECRET not in str(got.public_dict())
    with pytest.raises(RemoteError, match="node node1: SSH connection 'dlperf_node1' not found"):
        with_ssh_connections(c, {}.get)
    with pytest.raises(RemoteError, match="not a PEM/OpenSSH private key"):
        with_ssh_connections(c, {"dlperf_node1": {"extra": {"private_key": SECRET}}}.get)


@pytest.mark.parametrize("url", [
    f"s3://bucket/p?endpoint=https://AKIAEXAMPLE:{SECRET}@oss-cn-beijing.aliyuncs.com",
    f"s3://bucket/p?endpoint=https%3A%2F%2Fuser%3A{SECRET}%40minio.example:9000",
    f"s3://bucket/p?endpoint=http://minio.example:9000/%3Fsecret_key%3D{SECRET}",
])
def test_store_endpoint_with_credentials_is_refused(url):
    from dlperf_tasks.store import Store

    with pytest.raises(StoreError, match="refused: its endpoint URL: .*credential") as exc:
        Store.from_url(url)
    assert SECRET not in str(exc.value)


def test_store_endpoint_from_a_connection_with_credentials_is_refused():
    from dlperf_tasks.store import Store

    conn = {"login": "AKIA", "password": "x", "extra": {"endpoint_url": f"https://u:{SECRET}@s3.example"}}
    with pytest.raises(StoreError, match="endpoint URL must not contain credentials") as exc:
        Store.from_settings({"type": "s3", "bucket": "b", "connection": conn})
    assert SECRET not in str(exc.value)
    assert Store.from_url("s3://b/p?endpoint=http://127.0.0.1:9000&region=us-east-1") is not None


def test_job_start_line_keeps_hostile_words_as_positional_arguments():
    cmd = jobs.JobCommand(["echo", "$(id)", "a'b"], {"K": SECRET}, cwd="/tmp/x y", mkdirs=("/w/a;b",))
    words = shlex.split(_words(cmd))
    assert words[:2] == ["bash", "-c"] and words[2] == jobs.JOB_SCRIPT
    assert words[3:] == ["dlperf-job", "start", "/w/jobs/j_1", "-C", "/tmp/x y", "-m", "/w/a;b", "--",
                         "echo", "$(id)", "a'b"]
    with pytest.raises(ValueError):
        jobs.JobPaths("../x", "/w/jobs")
    with pytest.raises(ValueError):
        jobs.env_payload({"A B": "1"})
