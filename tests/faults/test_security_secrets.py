"""Planted secrets never leak, and published artifacts are redacted - through the real path:
a sweep on the private simulated cluster (real sshd, dockerd, registry with auth; GPUs simulated
by the stand-in) whose nodes are reached with a PASSPHRASE-protected SSH key whose TEXT and
passphrase come from Airflow SSH connections (``extra.private_key`` / ``private_key_passphrase``,
resolved with ``remote.connections.with_ssh_connections``), whose registry password comes from
the Airflow connection ``dlperf_registry`` (the Airflow layer's ``with_registry_connection``; no
password in the environment or an env file), then ``dlperf publish`` to a real SeaweedFS S3 whose
secret key comes from the environment. Also: the object store down during publish and back
later -> the spool is kept and ``dlperf publish --resume`` completes.

Searched for every secret: the progress output, Python log records (paramiko included), every
file the sweep wrote (trial files, logs, env.json, result.json, report.md), the publish spool,
every object in the bucket, and on the nodes (which share this machine): the docker client
config ``~/.docker/config.json`` (no login left behind), leftover per-run DOCKER_CONFIG
directories and job env files. Published objects must also hold no cluster IP address or host
name. The command lines of a RUNNING trial are checked in
``test_running_trial_has_no_secret_on_any_command_line`` (and on the builders in
tests/unit/test_remote_secrets.py)."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.cli import main
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, run_leftovers, sim_suite  # noqa: F401 (fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.s3]
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")


def _encrypted_key_text(sim, tmp_path: Path, passphrase: str) -> str:
    key = tmp_path / "id_enc"
    shutil.copy(sim.key_file, key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", passphrase, "-f", str(key)], check=True,
                   capture_output=True)
    text = key.read_text()
    key.unlink()  # from here on the key exists only as the connection's text
    assert passphrase not in text
    return text


def _connection_cluster(sim, tmp_path: Path, monkeypatch, passphrase: str) -> tuple[Cluster, str]:
    """The sim inventory with no key file and no registry password: each node names an Airflow SSH
    connection holding the key text + passphrase, the registry password is in the Airflow
    connection ``dlperf_registry`` (both as ``AIRFLOW_CONN_*`` variables, as a secrets backend
    would serve them). Returns the cluster and the key text."""
    from airflow.sdk import Connection

    from dlperf_tasks.airflow.tasks import with_registry_connection
    from dlperf_tasks.remote.connections import with_ssh_connections

    key_text = _encrypted_key_text(sim, tmp_path, passphrase)
    inv = yaml.safe_load(sim.yaml_path.read_text())
    inv.pop("env_file", None)
    inv["registry"].pop("username_env", None)
    inv["defaults"].pop("key_file", None)
    for n in inv["nodes"]:
        n.pop("key_file", None)
        n["ssh_conn_id"] = f"dlperf_ssh_{n['name']}"
        monkeypatch.setenv(f"AIRFLOW_CONN_DLPERF_SSH_{n['name'].upper()}", json.dumps(
            {"conn_type": "ssh", "host": n["host"], "login": "root",
             "extra": {"private_key": key_text, "private_key_passphrase": passphrase}}))
    monkeypatch.setenv("AIRFLOW_CONN_DLPERF_REGISTRY", json.dumps(
        {"conn_type": "generic", "host": sim.registry, "login": sim.env["DLPERF_REGISTRY_USER"],
         "password": sim.env["DLPERF_REGISTRY_PASSWORD"]}))
    cluster = Cluster.from_dict(inv, source="secrets-test")
    assert cluster.registry.resolve_password() is None  # only the connection has it

    def lookup(conn_id: str) -> dict:
        c = Connection.get(conn_id)
        return {"login": c.login, "password": c.password, "extra": c.extra_dejson}

    cluster = with_ssh_connections(with_registry_connection(cluster, "dlperf_registry"), lookup)
    assert cluster.registry.resolve_password() == sim.env["DLPERF_REGISTRY_PASSWORD"]
    assert all(n.private_key == key_text and n.key_file is None for n in cluster.nodes)
    return cluster, key_text


def _docker_login_left(registry: str) -> list[str]:
    """What the nodes (root on this machine) keep of a registry login: an auth entry for
    ``registry`` in ~/.docker/config.json, or a per-run DOCKER_CONFIG directory not removed."""
    found = []
    cfg = Path.home() / ".docker" / "config.json"
    if cfg.is_file():
        auths = json.loads(cfg.read_text() or "{}").get("auths", {})
        found += [f"{cfg}: auths[{k}]" for k in auths if registry in k]
    found += [str(p) for p in Path(tempfile.gettempdir()).glob("dlperf-docker-config.*")]
    return found


def _forget_login(registry: str) -> None:
    """Remove an auth entry for the simulated registry that an older build may have left."""
    cfg = Path.home() / ".docker" / "config.json"
    if cfg.is_file():
        data = json.loads(cfg.read_text() or "{}")
        data["auths"] = {k: v for k, v in data.get("auths", {}).items() if registry not in k}
        cfg.write_text(json.dumps(data, indent=1))


def _job_secret_files(sim) -> list[str]:
    """Job env / stdin files still on a node (the job deletes them before its command starts)."""
    return [str(p) for n in sim.nodes for p in Path(n.workdir).glob("jobs/*/*") if p.name in ("env", "stdin")]


def _files_text(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_bytes().decode(errors="replace") for p in root.rglob("*") if p.is_file()}


def _bucket_objects(s3, bucket: str) -> dict[str, bytes]:
    cli = s3.client()
    out = {}
    for page in cli.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = cli.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def _published_text(key: str, body: bytes) -> str:
    """What an object says: a ``.tar.gz`` is searched member by member after decompression (its
    compressed bytes would match short host names by chance), a PNG has no text to search."""
    import tarfile

    if key.endswith(".tar.gz"):
        parts = []
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
            for member in tar:
                parts.append(member.name)
                f = tar.extractfile(member) if member.isfile() else None
                if f is not None:
                    parts.append(f.read().decode(errors="replace"))
        return "\n".join(parts)
    if key.endswith(".png"):
        return ""
    return body.decode(errors="replace")


def test_secrets_never_leak_and_published_objects_are_redacted(fault_sim, s3_live, tmp_path, monkeypatch, caplog):
    sim, s3 = fault_sim, s3_live
    passphrase = "PASSPHRASE-" + secrets.token_hex(8)
    registry_password = sim.env["DLPERF_REGISTRY_PASSWORD"]  # random per cluster
    for k in sim.env:
        monkeypatch.delenv(k, raising=False)  # only the connections have the credentials
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    caplog.set_level(logging.DEBUG)
    _forget_login(sim.registry)

    cluster, key_text = _connection_cluster(sim, tmp_path, monkeypatch, passphrase)
    key_body = max(key_text.splitlines(), key=len)  # a line of the key's base64 body
    planted = {"ssh key passphrase": passphrase, "ssh private key text": key_body,
               "registry password (Airflow connection)": registry_password, "s3 secret key": s3.secret_key}
    suite = sim_suite(tmp_path, "pytorch-bert", "secrets", {"1n1g": 100.0, "2n8g": 1500.0},
                      env={"DLPERF_STANDIN_TIME_SCALE": "0.1"})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    run_id = f"fault-secrets-{int(time.time())}"
    out = tmp_path / run_id
    progress = io.StringIO()
    res = run_sweep(suite, p, cluster, out, SweepOptions(progress=progress, nodes=["node1", "node2"],
                                                         run_id=run_id, image=sim.image("pytorch:20.06-py3")))
    assert [r.status.value for r in res.all] == ["OK", "OK"], [r.reason for r in res.all]
    assert run_leftovers(sim, res) == []
    # the login happened (the pull needs it) and left nothing on the nodes
    assert _docker_login_left(sim.registry) == []
    assert _job_secret_files(sim) == []

    bucket = s3.new_bucket("sec")
    url = s3.store_url(bucket, "dlperf")
    # store down during publish: fails naming the endpoint, spool kept, no manifest in the store
    s3.stop()
    rc = main(["publish", str(out), "--store", url, "--inventory", str(sim.yaml_path), "--retries", "1"])
    assert rc == 2
    assert (out / "publish-spool" / "objects").is_dir()
    s3.start()
    assert not any(k.endswith("manifest.json") for k in _bucket_objects(s3, bucket))
    # back again: --resume uploads the same spool and completes
    assert main(["publish", "--resume", str(out)]) == 0
    objects = _bucket_objects(s3, bucket)
    manifests = [k for k in objects if k.endswith(f"{run_id}/manifest.json")]
    assert len(manifests) == 1, sorted(objects)
    manifest = json.loads(objects[manifests[0]])
    listed = {o["path"] for o in manifest["objects"]}
    assert "result.json" in listed and any(x.startswith("logs/") for x in listed)

    texts = {"progress output": progress.getvalue(), "log records": caplog.text,
             "cluster repr": repr(cluster) + json.dumps(cluster.public_dict())}
    texts.update({f"run dir {k}": v for k, v in _files_text(out).items()})
    texts.update({f"bucket {k}": _published_text(k, v) for k, v in objects.items()})
    for what, secret in planted.items():
        leaks = [where for where, text in texts.items() if secret in text]
        assert leaks == [], f"{what} found in {leaks}"

    # redaction: no cluster IP address, host name or the controller's host name in anything published
    hosts = {n.host for n in sim.nodes} | {socket.gethostname()}
    for key, body in objects.items():
        text = _published_text(key, body)
        assert not IPV4.search(text) and not IPV4.search(key), (key, IPV4.search(text) or key)
        for h in hosts:
            assert h not in text and h not in key, (key, h)


def _cmdlines() -> dict[int, str]:
    """Every process' command line on this machine (the simulated nodes and their containers
    included), NUL separators shown as spaces."""
    out = {}
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out[int(p.parent.name)] = p.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


def test_running_trial_has_no_secret_on_any_command_line(fault_sim, tmp_path, monkeypatch):
    """A suite env secret and a launcher env secret reach the RUNNING container (docker inspect
    shows them: env files are still visible there) but no process' command line on the node
    (/proc/*/cmdline, read while the trial's iterations come), and the job's env file is already
    deleted then. The registry password of the prepare step stays off the nodes too."""
    from dlperf_tasks.core.model import TrialStatus
    from dlperf_tasks.remote.runtime import make_runtime
    from dlperf_tasks.remote.ssh import SSHPool
    from dlperf_tasks.remote.trial import TrialWatch, run_trial

    sim = fault_sim
    suite_secret, launcher_secret = "SUITE-" + secrets.token_hex(8), "LAUNCHER-" + secrets.token_hex(8)
    suite = sim_suite(tmp_path, "pytorch-bert", "cmdline", {"1n1g": 100.0},
                      env={"DLPERF_STANDIN_TIME_SCALE": "0.3", "PLANTED_SUITE_TOKEN": suite_secret},
                      launcher={"env": {"PLANTED_LAUNCHER_TOKEN": launcher_secret}})
    trial = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1}).trials[0].trial
    cluster = Cluster.from_yaml(sim.yaml_path)
    _forget_login(sim.registry)
    planted = [suite_secret, launcher_secret, sim.env["DLPERF_REGISTRY_PASSWORD"]]
    seen: dict = {}

    def on_progress(prog) -> None:
        if prog.state == "running" and prog.iteration >= 2 and "cmdlines" not in seen:
            seen["cmdlines"] = _cmdlines()
            seen["job_files"] = _job_secret_files(sim)
            ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=dlperf.trial={trial.key}"],
                                 capture_output=True, text=True).stdout.split()
            seen["inspect"] = subprocess.run(["docker", "inspect", *ids], capture_output=True,
                                             text=True).stdout if ids else ""

    with SSHPool(cluster) as pool:
        runtime = make_runtime(suite.container, image=sim.image("pytorch:20.06-py3"), registry=cluster.registry,
                               launcher=suite.launcher, ssh_port=cluster.mpi_ssh_port)
        facts = runtime.prepare(pool, ["node1"])  # docker login (per-run config) + pull
        assert _docker_login_left(sim.registry) == []
        res = run_trial(cluster, ["node1"], trial, suite, "secrets-cmdline", tmp_path / "out", pool=pool,
                        runtime=runtime, facts=facts, watch=TrialWatch(progress=on_progress, poll_s=0.1))
    assert res.status == TrialStatus.OK, res.reason
    assert "cmdlines" in seen, "the trial never reported a running iteration"
    assert any("docker run" in c and "--env-file /dev/stdin" in c for c in seen["cmdlines"].values())
    # the values did reach the container (so the search below searched for something real)
    assert suite_secret in seen["inspect"] and launcher_secret in seen["inspect"]
    for secret in planted:
        leaks = {pid: c[:200] for pid, c in seen["cmdlines"].items() if secret in c}
        assert leaks == {}, leaks
    assert seen["job_files"] == []
    assert _docker_login_left(sim.registry) == [] and _job_secret_files(sim) == []
