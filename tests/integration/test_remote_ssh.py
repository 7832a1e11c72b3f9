"""Inventory, SSH pool and detached jobs against real OpenSSH servers on 127.0.0.x."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote import jobs
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool
from tests.fixtures.sshd_nodes import make_nodes, open_pool, stop_nodes

HOSTILE = ["a b", "$(touch /tmp/dlperf_pwned)", "`id`", "x;rm -rf /tmp/nothing", "it's", 'q"uote', "*", "\\n", "-rf",
           "$HOME", "new\nline", "ünï"]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    nodes, path = make_nodes(tmp_path_factory.mktemp("sshd"), 2, base_octet=11)
    yield nodes, path
    stop_nodes(nodes)


@pytest.fixture
def pool(two_nodes):
    with open_pool(*two_nodes) as p:
        yield p


# ---- inventory ----------------------------------------------------------------
def test_inventory_yaml_and_secrets_hidden(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"defaults": {"gpus": 4, "key_file": "/k", "password": "hunter2"},
                                 "nodes": {"a": {"host": "10.1.1.1"}, "b": {"host": "10.1.1.2", "port": 2200}}}))
    c = Cluster.from_yaml(p)
    assert c.names == ["a", "b"]
    assert c.node("b").port == 2200 and c.node("a").gpus == 4
    assert c.node("a").strict_host_key_checking is True
    assert "hunter2" not in repr(c) and "10.1.1.1" not in str(c.public_dict())


def test_inventory_errors_name_the_problem(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"nodes": [{"name": "a", "host": "h", "gpus": "many"}]}))
    with pytest.raises(RemoteError, match="node a: gpus must be an integer"):
        Cluster.from_yaml(p)
    p.write_text(yaml.safe_dump({"nodes": [{"name": "a", "host": "h", "colour": 1}]}))
    with pytest.raises(RemoteError, match="unknown key.*colour"):
        Cluster.from_yaml(p)
    p.write_text(yaml.safe_dump({"nodes": [{"name": "a", "host": "h"}], "registry": {"server": "r", "password": "x"}}))
    with pytest.raises(RemoteError, match="password_env"):
        Cluster.from_yaml(p)


def test_inventory_from_connection_dicts():
    c = Cluster.from_connections([
        {"conn_id": "gpu1", "host": "10.0.0.1", "port": 22, "login": "bench",
         "extra": {"private_key": "-----BEGIN KEY-----", "gpus": "8", "no_host_key_check": "true", "interface": "ib0"}},
        {"conn_id": "gpu2", "host": "10.0.0.2", "login": "bench", "extra": '{"name": "n2", "gpus": 4}'},
    ])
    assert c.names == ["gpu1", "n2"]
    assert c.node("gpu1").strict_host_key_checking is False and c.node("gpu1").interface == "ib0"
    assert c.node("n2").strict_host_key_checking is True and c.node("n2").gpus == 4
    assert "BEGIN KEY" not in repr(c)


# ---- ssh ----------------------------------------------------------------------
def test_run_reuses_one_connection_and_quotes_hostile_values(pool):
    import shlex

    for v in HOSTILE:
        res = pool.run("node1", "printf %s " + shlex.quote(v), check=True)
        assert res.stdout == v
    assert not os.path.exists("/tmp/dlperf_pwned")
    t1 = pool.client("node1").get_transport()
    pool.run("node1", "true")
    assert pool.client("node1").get_transport() is t1


def test_stdin_and_rc_and_timeout(pool):
    res = pool.run("node2", "cat; exit 3", stdin=b"secret-from-stdin")
    assert res.rc == 3 and res.stdout == "secret-from-stdin"
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match="node2: command timed out"):
        pool.run("node2", "sleep 30", timeout=1)
    assert time.monotonic() - t0 < 5


def test_reconnect_after_drop(pool, two_nodes):
    nodes, _ = two_nodes
    pool.run("node1", "true")
    pool.client("node1").get_transport().close()  # the connection drops
    assert pool.run("node1", "echo back").stdout.strip() == "back"


def test_unreachable_node_is_named(pool, two_nodes):
    nodes, _ = two_nodes
    pool.run("node2", "true")
    nodes[1].kill()
    with pytest.raises(RemoteError) as ei:
        pool.run("node2", "true")
    assert ei.value.node == "node2" and "node2" in str(ei.value)
    nodes[1].start()
    assert pool.run("node2", "echo ok").stdout.strip() == "ok"


def test_host_key_checked_by_default(two_nodes, tmp_path):
    nodes, path = two_nodes
    data = yaml.safe_load(path.read_text())
    other = tmp_path / "known_hosts"
    other.write_text("")
    data["defaults"]["known_hosts"] = str(other)
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    with SSHPool(Cluster.from_yaml(p)) as pool, pytest.raises(RemoteError, match="node1: .*known_hosts"):
        pool.run("node1", "true")
    data["defaults"]["strict_host_key_checking"] = False
    p.write_text(yaml.safe_dump(data))
    with SSHPool(Cluster.from_yaml(p)) as pool:
        assert pool.run("node1", "true").ok


def test_sftp_read_with_offset(pool, two_nodes):
    nodes, _ = two_nodes
    f = nodes[0].workdir / "f.txt"
    f.write_bytes(b"0123456789")
    assert pool.read("node1", str(f), 4, 3) == b"456"
    assert pool.read("node1", str(f), 10) == b""
    assert pool.read("node1", str(nodes[0].workdir / "missing")) is None


def test_put_bytes_replaces_a_file_atomically(pool, two_nodes):
    """A reader on the node (another run's trial reading a catalog file that this run's prepare
    rewrites) sees the old or the new content, never a truncated or half-written file."""
    import threading

    nodes, _ = two_nodes
    f = nodes[0].workdir / "catalog" / "bert_config.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    a, b = b"a" * 3_000_000, b"b" * 2_000_000
    pool.put_bytes("node1", str(f), a, mode=0o644)
    stop, seen = threading.Event(), []

    def reader():
        while not stop.is_set():
            data = f.read_bytes()
            if data not in (a, b):
                seen.append(len(data))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(12):
            pool.put_bytes("node1", str(f), b if i % 2 == 0 else a, mode=0o644)
    finally:
        stop.set()
        t.join()
    assert seen == [], f"partial reads of sizes {seen[:5]}"
    assert f.read_bytes() == a and oct(f.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in f.parent.iterdir()) == ["bert_config.json"]  # no temporary file left


# ---- detached jobs -------------------------------------------------------------
def test_job_runs_detached_with_hostile_args_and_exit_code(pool):
    """argv words and env values (newlines included) arrive literally; the exit code is kept; the
    env file is gone once the job runs."""
    argv = ["python3", "-c", "import os, sys; print(repr(sys.argv[1:] + [os.environ['E'], os.environ['F']])); "
            "sys.exit(7)"] + HOSTILE
    cmd = jobs.JobCommand(argv, {"E": "$(touch /tmp/dlperf_pwned)", "F": "two\nlines"}, cwd="/tmp")
    job = jobs.start_job(pool, "node1", cmd, jobs.new_job_id("t/1 x"))
    deadline = time.monotonic() + 10
    while jobs.exit_code(pool, job) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert jobs.exit_code(pool, job) == 7
    out = jobs.read_log(pool, job, 0).decode()
    assert out.strip() == repr(HOSTILE + ["$(touch /tmp/dlperf_pwned)", "two\nlines"])
    assert not os.path.exists("/tmp/dlperf_pwned")
    assert pool.read("node1", job.paths.file("env")) is None
    jobs.remove_job_dir(pool, job)
    assert pool.read("node1", job.paths.log_file) is None


def test_kill_takes_the_whole_process_group(pool):
    # bash -> two sleep children, all in the job's process group
    job = jobs.start_job(pool, "node2", jobs.JobCommand(["bash", "-c", "sleep 300 & sleep 301 & echo started; wait"]),
                         jobs.new_job_id("kill"))
    deadline = time.monotonic() + 5
    while b"started" not in jobs.read_log(pool, job, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    pgid = int(pool.read("node2", job.paths.pid_file))
    members = pool.run("node2", f"pgrep -g {pgid} | wc -l").stdout.strip()
    assert int(members) >= 3
    assert jobs.is_alive(pool, job)
    assert jobs.kill_job(pool, job, grace_s=3)
    # no member still running (an exited one may wait a moment for init to reap it: a zombie)
    live = pool.run("node2", f"ps -e -o pgid=,pid=,stat= | awk '$1 == {pgid} && $3 !~ /^Z/'").stdout.strip()
    assert live == "", live
    assert not jobs.is_alive(pool, job)


def test_signal_refuses_a_corrupt_pid_file(pool):
    """A pid file holding garbage, 0, 1 or -1 never turns into a broadcast kill."""
    job = jobs.start_job(pool, "node1", jobs.JobCommand(["true"]), jobs.new_job_id("corrupt"))
    deadline = time.monotonic() + 5
    while jobs.exit_code(pool, job) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    for bad in (b"1", b"0", b"-1", b"12; echo hit", b""):
        pool.put_bytes("node1", job.paths.pid_file, bad)
        assert not jobs.signal_job(pool, job, "0"), bad
    jobs.remove_job_dir(pool, job)


def test_log_streams_by_offset(pool):
    job = jobs.start_job(pool, "node1", jobs.JobCommand(["bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.3; done"]),
                         jobs.new_job_id("s"))
    got, offset = b"", 0
    deadline = time.monotonic() + 10
    while jobs.exit_code(pool, job) is None and time.monotonic() < deadline:
        chunk = jobs.read_log(pool, job, offset)
        offset += len(chunk)
        got += chunk
        time.sleep(0.1)
    got += jobs.read_log(pool, job, offset)
    assert got == b"line1\nline2\nline3\n"
