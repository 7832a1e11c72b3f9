"""The store against a REAL SeaweedFS S3 server (tests/fixtures/s3.py): publish, fetch back
with plain boto3, idempotence, errors (wrong credentials, missing bucket, unreachable
endpoint), redaction of every object, conditional index updates under concurrency."""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import botocore.exceptions
import pytest

from dlperf_tasks.core.errors import NotFoundError, StoreError
from dlperf_tasks.store.backends import AccessRefused
from dlperf_tasks.store import RetryPolicy, Store
from tests.fixtures.s3 import SAMPLE_INVENTORY, make_run_dir

pytestmark = pytest.mark.s3

FAST = RetryPolicy(attempts=2, base_delay=0.05, max_delay=0.1)
RUN_ID = "mxnet-bert-20260102T030405-abc123"
SECRETS = ["10.11.0.2", "10.11.0.3", "fd00:11::3", "gpuhost-c.cluster.example", "benchuser", "opsalice",
           "gpu-node-a", "gpu-node-b", "gpu-node-c"]


def bucket_objects(client, bucket, prefix=""):
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = o
    return out


@pytest.fixture
def bucket(s3_live):
    return s3_live.new_bucket()


@pytest.fixture
def store(s3_live, bucket):
    return Store.from_settings(s3_live.settings(bucket, prefix="dlperf"), inventory=SAMPLE_INVENTORY, retry=FAST)


def test_publish_then_plain_boto3_reads_match_the_manifest(s3_live, bucket, store, tmp_path):
    run_dir = make_run_dir(tmp_path, log_lines=3000)
    res = store.publish(run_dir)
    assert res.url == f"s3://{bucket}/dlperf/runs/mxnet-bert/2026-01-02/{RUN_ID}"
    c = s3_live.client()
    base = f"dlperf/runs/mxnet-bert/2026-01-02/{RUN_ID}/"
    manifest = json.loads(c.get_object(Bucket=bucket, Key=base + "manifest.json")["Body"].read())
    keys = set(bucket_objects(c, bucket, base))
    assert keys == {base + e["path"] for e in manifest["objects"]} | {base + "manifest.json"}
    for e in manifest["objects"]:
        body = c.get_object(Bucket=bucket, Key=base + e["path"])["Body"].read()
        assert hashlib.sha256(body).hexdigest() == e["sha256"] and len(body) == e["size"]
    index = json.loads(c.get_object(Bucket=bucket, Key="dlperf/index/mxnet-bert.json")["Body"].read())
    assert [r["run_id"] for r in index["runs"]] == [RUN_ID]
    assert index["runs"][0]["cells"]["mxnet-bert/bz32/fp32/1n8g"]["median_speed"] == 928.03
    # read API over S3
    assert store.list_runs(suite="mxnet-bert")[0]["path"] == f"runs/mxnet-bert/2026-01-02/{RUN_ID}"
    assert store.read_result(RUN_ID)["run"]["run_id"] == RUN_ID
    out = store.get_run(RUN_ID, tmp_path / "back")
    assert (out / "logs.tar.gz").stat().st_size == next(e["size"] for e in manifest["objects"]
                                                        if e["path"] == "logs.tar.gz")
    print(f"published {res.total_bytes} bytes in {res.seconds:.2f}s ({len(res.uploaded)} objects)")


def test_no_inventory_secret_in_any_object_in_the_bucket(s3_live, bucket, store, tmp_path):
    store.publish(make_run_dir(tmp_path))
    c = s3_live.client()
    blobs = []
    for key in bucket_objects(c, bucket):
        data = c.get_object(Bucket=bucket, Key=key)["Body"].read()
        blobs.append((key, data))
        if key.endswith(".tar.gz"):
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                blobs.extend((m.name, tar.extractfile(m).read()) for m in tar.getmembers())
    assert len(blobs) >= 10
    for name, data in blobs:
        for s in SECRETS:
            assert s not in name and s.encode() not in data, (s, name)


def test_publishing_twice_changes_and_duplicates_nothing(s3_live, bucket, store, tmp_path):
    run_dir = make_run_dir(tmp_path)
    first = store.publish(run_dir)
    c = s3_live.client()
    before = {k: (o["ETag"], o["Size"], o["LastModified"]) for k, o in bucket_objects(c, bucket).items()}
    second = store.publish(run_dir)
    after = {k: (o["ETag"], o["Size"], o["LastModified"]) for k, o in bucket_objects(c, bucket).items()}
    assert second.uploaded == [] and len(second.skipped) == len(first.uploaded)
    assert after == before


def test_server_down_mid_publish_then_resume_via_cli(s3_live, bucket, store, tmp_path):
    run_dir = make_run_dir(tmp_path)
    spool_objects = run_dir / "publish-spool" / "objects"

    def stop_after_second(key, n):
        if n == 2:
            s3_live.stop()

    with pytest.raises(StoreError) as ei:
        store.publish(run_dir, on_uploaded=stop_after_second)
    msg = str(ei.value)
    assert s3_live.endpoint in msg and bucket in msg and "incomplete" in msg and "--resume" in msg
    assert "/dlperf/runs/mxnet-bert/2026-01-02/" in msg or "key dlperf/runs/" in msg  # names the key
    manifest = json.loads((spool_objects / "manifest.json").read_text())
    for e in manifest["objects"]:  # the spool is complete
        p = spool_objects / e["path"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == e["sha256"]

    s3_live.start()
    c = s3_live.client()
    base = f"dlperf/runs/mxnet-bert/2026-01-02/{RUN_ID}/"
    partial = bucket_objects(c, bucket, base)
    assert base + "manifest.json" not in partial and 1 <= len(partial) <= 2
    assert not store.is_complete(RUN_ID)

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), **s3_live.env())
    r = subprocess.run([sys.executable, "-m", "dlperf_tasks", "publish", "--resume", str(run_dir)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "published" in r.stdout
    objs = bucket_objects(c, bucket, base)
    assert set(objs) == {base + e["path"] for e in manifest["objects"]} | {base + "manifest.json"}
    for e in manifest["objects"] + [{"path": "manifest.json",
                                     "sha256": hashlib.sha256((spool_objects / "manifest.json").read_bytes()).hexdigest()}]:
        body = c.get_object(Bucket=bucket, Key=base + e["path"])["Body"].read()
        assert hashlib.sha256(body).hexdigest() == e["sha256"] == \
            hashlib.sha256((spool_objects / e["path"]).read_bytes()).hexdigest()
    assert store.is_complete(RUN_ID)
    assert [x["run_id"] for x in store.list_runs()] == [RUN_ID]


def test_wrong_credentials_are_a_clear_error(s3_live, bucket, tmp_path):
    cfg = dict(s3_live.settings(bucket), secret_access_key="definitely-wrong")
    s = Store.from_settings(cfg, retry=FAST)
    with pytest.raises(StoreError) as ei:
        s.publish(make_run_dir(tmp_path))
    msg = str(ei.value)
    assert "refused" in msg and "credentials" in msg and bucket in msg and s3_live.endpoint in msg
    assert "definitely-wrong" not in msg
    with pytest.raises(AccessRefused, match="LIST refused"):  # the kind the bucket check branches on
        s.backend.list_keys("")
    with pytest.raises(StoreError, match=r"refused .*\(HEAD bucket needs s3:ListBucket on the bucket\)"):
        s.backend.check()
    assert bucket_objects(s3_live.client(), bucket) == {}


def test_missing_bucket_is_a_clear_error(s3_live, tmp_path):
    s = Store.from_settings(s3_live.settings("no-such-bucket-xyz"), retry=FAST)
    with pytest.raises(StoreError, match="bucket 'no-such-bucket-xyz' does not exist"):
        s.publish(make_run_dir(tmp_path))
    with pytest.raises(NotFoundError, match="bucket 'no-such-bucket-xyz' does not exist"):  # the results page: 404
        s.list_runs()
    with pytest.raises(botocore.exceptions.ClientError):
        s3_live.client().head_bucket(Bucket="no-such-bucket-xyz")


def test_unreachable_endpoint_via_cli_no_traceback(s3_live, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir = make_run_dir(tmp_path, log_lines=5)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), **s3_live.env())
    r = subprocess.run([sys.executable, "-m", "dlperf_tasks", "publish", str(run_dir), "--retries", "1", "--store",
                        f"s3://somebucket/p?endpoint=http://127.0.0.1:{port}&addressing_style=path"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    first, error = r.stderr.splitlines()  # the store that was read, then the one-line error
    assert first.startswith("store: s3://somebucket/p") and error.startswith("dlperf: error: ")
    assert f"endpoint http://127.0.0.1:{port} bucket somebucket" in r.stderr and "unreachable" in r.stderr
    assert (run_dir / "publish-spool" / "objects" / "manifest.json").is_file()


def test_credentials_from_environment_and_airflow_connection(s3_live, bucket, tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    for k, v in s3_live.env().items():
        monkeypatch.setenv(k, v)
    s = Store.from_url(s3_live.store_url(bucket, prefix="envcreds"), retry=FAST)
    s.publish(make_run_dir(tmp_path / "a", run_id="env1"))
    assert s.list_runs()[0]["run_id"] == "env1"
    for k in s3_live.env():
        monkeypatch.delenv(k)
    conn = {"conn_id": "dlperf_store", "conn_type": "aws", "login": s3_live.access_key,
            "password": s3_live.secret_key,
            "extra": json.dumps({"endpoint_url": s3_live.endpoint, "region_name": "us-east-1",
                                 "addressing_style": "path"})}
    a = Store.from_connection(conn, bucket=bucket, prefix="envcreds", retry=FAST)
    assert a.read_result("env1")["run"]["run_id"] == "env1"


def test_concurrent_index_updates_use_conditional_writes(s3_live, bucket, tmp_path):
    s = Store.from_settings(s3_live.settings(bucket), retry=FAST)
    assert s.backend.supports_conditional
    dirs = [make_run_dir(tmp_path / f"w{i}", run_id=f"c{i}", started_at=f"2026-02-0{i + 1}T00:00:00Z",
                         log_lines=2) for i in range(5)]
    errors = []

    def pub(d):
        try:
            Store.from_settings(s3_live.settings(bucket), retry=FAST).publish(d)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pub, args=(d,)) for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [r["run_id"] for r in s.list_runs(suite="mxnet-bert")] == [f"c{i}" for i in range(5)]


def test_corrupted_object_is_detected_on_get_run(s3_live, bucket, store, tmp_path):
    store.publish(make_run_dir(tmp_path))
    key = f"dlperf/runs/mxnet-bert/2026-01-02/{RUN_ID}/result.json"
    s3_live.client().put_object(Bucket=bucket, Key=key, Body=b"{}")
    with pytest.raises(StoreError) as ei:
        store.get_run(RUN_ID, tmp_path / "out")
    assert key in str(ei.value) and hashlib.sha256(b"{}").hexdigest() in str(ei.value)


def test_big_log_goes_up_as_multipart_and_verifies(s3_live, bucket, tmp_path, monkeypatch):
    """A log over the multipart threshold (lowered to 5 MiB here so the test stays small) is
    streamed in parts and still verified against the manifest."""
    from dlperf_tasks.store import s3backend as backends

    monkeypatch.setattr(backends, "MULTIPART_THRESHOLD", 5 << 20)
    monkeypatch.setattr(backends, "MULTIPART_CHUNK", 5 << 20)
    run_dir = make_run_dir(tmp_path, log_lines=10)
    big = run_dir / "logs" / "gpu-node-a" / "big.log"
    with open(big, "w") as f:
        for i in range(130000):
            f.write(f"iter {i} speed 928.{i % 100:02d} from 10.11.0.2 user benchuser\n")
    s = Store.from_settings(s3_live.settings(bucket), inventory=SAMPLE_INVENTORY, retry=FAST)
    res = s.publish(run_dir)
    c = s3_live.client()
    key = f"dlperf/runs/mxnet-bert/2026-01-02/{RUN_ID}/logs/_node-1_/big.log"
    head = c.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] > 5 << 20
    assert "-" in head["ETag"]  # multipart ETag "<md5>-<parts>"
    body = c.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert b"10.11.0.2" not in body and b"benchuser" not in body and body.count(b"<ip-1>") == 130000
    m = s.read_manifest(RUN_ID)
    assert hashlib.sha256(body).hexdigest() == next(e["sha256"] for e in m["objects"]
                                                    if e["path"] == "logs/_node-1_/big.log")
    print(f"big publish: {res.total_bytes / 1e6:.1f} MB in {res.seconds:.2f}s")


def test_replace_on_s3_leaves_only_the_new_run(s3_live, bucket, store, tmp_path):
    """``publish --replace`` on SeaweedFS: the replaced run (another suite, another date, a recorded
    verdict, an extra log) loses every object, its index row and the verdict on it."""
    first = make_run_dir(tmp_path / "one", run_id=RUN_ID, suite="pytorch-bert",
                         started_at="2026-01-02T03:04:05+00:00", log_lines=5)
    (first / "logs" / "gpu-node-a" / "only_in_the_old_run.log").write_text("step 1\n")
    store.publish(first)
    store.annotate_run(RUN_ID, "regressions", {"verdict": "REGRESSION"}, index_value=["slower"])
    c = s3_live.client()
    old_base = f"dlperf/runs/pytorch-bert/2026-01-02/{RUN_ID}/"
    old_keys = set(bucket_objects(c, bucket, old_base))
    assert any("only_in_the_old_run" in k for k in old_keys) and any("annotations/" in k for k in old_keys)
    assert store.list_runs(suite="pytorch-bert")[0]["regressions"] == ["slower"]

    second = make_run_dir(tmp_path / "two", run_id=RUN_ID, suite="mxnet-bert",
                          started_at="2026-01-05T03:04:05+00:00", log_lines=5)
    res = store.publish(second, replace=True)
    assert res.replaced and res.replaced_left == []
    assert bucket_objects(c, bucket, old_base) == {}
    old_index = json.loads(c.get_object(Bucket=bucket, Key="dlperf/index/pytorch-bert.json")["Body"].read())
    assert old_index["runs"] == []
    new_index = json.loads(c.get_object(Bucket=bucket, Key="dlperf/index/mxnet-bert.json")["Body"].read())
    (row,) = new_index["runs"]
    assert row["run_id"] == RUN_ID and "regressions" not in row and row["started_at"] == "2026-01-05T03:04:05+00:00"
    assert store.read_annotation(RUN_ID, "regressions") is None
    new_base = f"dlperf/runs/mxnet-bert/2026-01-05/{RUN_ID}/"
    manifest = json.loads(c.get_object(Bucket=bucket, Key=new_base + "manifest.json")["Body"].read())
    assert set(bucket_objects(c, bucket, "dlperf/runs/")) == \
        {new_base + e["path"] for e in manifest["objects"]} | {new_base + "manifest.json"}
