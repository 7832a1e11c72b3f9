"""Planted secrets never leak, and published artifacts are redacted - through the real path:
a sweep on the private simulated cluster (real sshd, dockerd, registry with auth; GPUs simulated
by the stand-in) whose nodes are reached with a PASSPHRASE-protected SSH key (given as the
connection password, as an Airflow SSH connection does), whose registry password comes from the
connection, then ``dlperf publish`` to a real SeaweedFS S3 whose secret key comes from the
environment. Also: the object store down during publish and back later -> the spool is kept
and ``dlperf publish --resume`` completes.

Searched for every secret: the progress output, Python log records (paramiko included), every
file the sweep wrote (trial files, logs, env.json, result.json, report.md), the publish spool,
every object in the bucket, the command lines of the processes and the containers' environment
seen while the trial ran. Published objects must also hold no cluster IP address or host name."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from dlperf_tasks.cli import main
from dlperf_tasks.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, run_leftovers, sim_suite  # noqa: F401 (fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.s3]
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")


def _encrypted_key_cluster(sim, tmp_path: Path, passphrase: str) -> Cluster:
    key = tmp_path / "id_enc"
    shutil.copy(sim.key_file, key)
    key.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", passphrase, "-f", str(key)], check=True,
                   capture_output=True)
    assert passphrase not in key.read_text()
    conns = [{"conn_id": f"dlperf_{n.name}", "host": n.host, "port": n.port, "login": "root", "password": passphrase,
              "extra": {"name": n.name, "key_file": str(key), "known_hosts": str(sim.known_hosts), "gpus": n.gpus,
                        "workdir": n.workdir, "data_dir": n.data_dir, "interface": "lo"}}
             for n in sim.nodes]
    registry = {"host": sim.registry, "login": sim.env["DLPERF_REGISTRY_USER"],
                "password": sim.env["DLPERF_REGISTRY_PASSWORD"]}
    return Cluster.from_connections(conns, name="fault-matrix", registry=registry)


def _watch(run_id: str, seen: list, stop: threading.Event) -> None:
    """Collect process command lines and the trial containers' environment while the sweep runs."""
    while not stop.is_set():
        seen.append(subprocess.run(["ps", "axww", "-o", "args"], capture_output=True, text=True).stdout)
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=dlperf.run={run_id}"],
                             capture_output=True, text=True).stdout.split()
        if ids:
            seen.append(subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True).stdout)
        time.sleep(0.3)


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
    monkeypatch.delenv("DLPERF_REGISTRY_PASSWORD", raising=False)  # only the connection has it
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    planted = {"ssh key passphrase": passphrase, "registry password": registry_password,
               "s3 secret key": s3.secret_key}
    caplog.set_level(logging.DEBUG)

    cluster = _encrypted_key_cluster(sim, tmp_path, passphrase)
    suite = sim_suite(tmp_path, "pytorch-bert", "secrets", {"1n1g": 100.0, "2n8g": 1500.0},
                      env={"DLPERF_STANDIN_TIME_SCALE": "0.1"})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    run_id = f"fault-secrets-{int(time.time())}"
    out = tmp_path / run_id
    progress = io.StringIO()
    seen: list[str] = []
    stop = threading.Event()
    th = threading.Thread(target=_watch, args=(run_id, seen, stop))
    th.start()
    try:
        res = run_sweep(suite, p, cluster, out, SweepOptions(progress=progress, nodes=["node1", "node2"],
                                                             run_id=run_id, image=sim.image("pytorch:20.06-py3")))
    finally:
        stop.set()
        th.join()
    assert [r.status.value for r in res.all] == ["OK", "OK"], [r.reason for r in res.all]
    assert run_leftovers(sim, res) == []
    assert any(f'"dlperf.run": "{run_id}"' in s and '"Env"' in s for s in seen)  # the watcher saw the containers

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
             "cluster repr": repr(cluster) + json.dumps(cluster.public_dict()),
             "processes and containers": "\n".join(seen)}
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
