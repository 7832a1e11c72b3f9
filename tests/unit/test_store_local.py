"""Publish / read API on the local directory backend (the embedded default): no mocks,
real files; failures are injected by replacing the store directory with a plain file."""

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from dlperf_tasks.cli import main as cli_main
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import RetryPolicy, Store
from dlperf_tasks.store.spool import SPOOL_DIR
from tests.fixtures.s3 import SAMPLE_INVENTORY, make_run_dir

FAST = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)
SECRETS = ["10.11.0.2", "10.11.0.3", "fd00:11::3", "gpuhost-c.cluster.example", "benchuser", "opsalice",
           "gpu-node-a", "gpu-node-b", "gpu-node-c"]


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def store_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha(p) for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture
def run_dir(tmp_path):
    return make_run_dir(tmp_path / "work")


@pytest.fixture
def store(tmp_path):
    return Store.from_url(f"file://{tmp_path / 'store'}", inventory=SAMPLE_INVENTORY, retry=FAST)


def test_publish_writes_layout_manifest_last_and_checksums_match(store, run_dir, tmp_path):
    order = []
    res = store.publish(run_dir, on_uploaded=lambda key, n: order.append(key))
    base = tmp_path / "store" / "runs" / "mxnet-bert" / "2026-01-02" / "mxnet-bert-20260102T030405-abc123"
    assert res.url == f"file://{base}"
    assert order[0].endswith("/logs.tar.gz") and order[-1].endswith("/manifest.json")
    assert order.index(res.manifest_key) == len(order) - 1
    rels = [k.split("abc123/", 1)[1] for k in order]
    assert rels.index("result.json") > max(i for i, r in enumerate(rels) if r.startswith("logs"))
    manifest = json.loads((base / "manifest.json").read_text())
    listed = {e["path"] for e in manifest["objects"]}
    on_disk = {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()} - {"manifest.json"}
    assert listed == on_disk
    for e in manifest["objects"]:
        assert sha(base / e["path"]) == e["sha256"] and (base / e["path"]).stat().st_size == e["size"]
    # spool == published bytes
    spool = run_dir / SPOOL_DIR / "objects"
    assert store_files(spool) == {k: v for k, v in store_files(base).items()}
    assert json.loads((run_dir / SPOOL_DIR / "state.json").read_text())["complete"] is True


def test_no_secret_survives_in_any_published_object(store, run_dir, tmp_path):
    store.publish(run_dir)
    root = tmp_path / "store"
    blobs = []
    for p in root.rglob("*"):
        if p.is_file():
            blobs.append((str(p.relative_to(root)), p.read_bytes()))
            if p.name.endswith(".tar.gz"):
                with tarfile.open(p) as tar:
                    for m in tar.getmembers():
                        blobs.append((m.name, tar.extractfile(m).read()))
    assert len(blobs) > 8
    for name, data in blobs:
        for s in SECRETS:
            assert s not in name and s.encode() not in data, (s, name)
    # the unredacted copy stays local, and the map never leaves the machine
    assert "10.11.0.2" in (run_dir / "report.md").read_text()
    assert "10.11.0.2" in (run_dir / SPOOL_DIR / "local-only" / "redaction-map.json").read_text()
    result = store.read_result("mxnet-bert-20260102T030405-abc123")
    assert result["run"]["env"]["master_addr"] == "<ip-1>"
    assert result["cells"][0]["trials"][0]["node_names"] == ["<node-1>"]


def test_republish_is_idempotent(store, run_dir, tmp_path):
    first = store.publish(run_dir)
    before = store_files(tmp_path / "store")
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "store").rglob("*") if p.is_file()}
    second = store.publish(run_dir)
    assert second.uploaded == [] and sorted(second.skipped) == sorted(first.uploaded)
    assert store_files(tmp_path / "store") == before
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    assert len(store.list_runs()) == 1


def test_failed_publish_keeps_spool_no_manifest_and_resume_completes(store, run_dir, tmp_path):
    root = tmp_path / "store"
    moved = tmp_path / "store-away"

    def break_store(key, n):
        if n == 2:  # the store disappears after the second object: writes now fail for real
            root.rename(moved)
            root.write_text("not a directory")

    with pytest.raises(StoreError) as ei:
        store.publish(run_dir, on_uploaded=break_store)
    msg = str(ei.value)
    assert "incomplete" in msg and "--resume" in msg and str(root) in msg
    root.unlink()
    moved.rename(root)
    assert not list(root.rglob("manifest.json"))
    assert not store.is_complete("mxnet-bert-20260102T030405-abc123")
    spool = run_dir / SPOOL_DIR / "objects"
    spooled = store_files(spool)
    assert "manifest.json" in spooled and "logs.tar.gz" in spooled
    state = json.loads((run_dir / SPOOL_DIR / "state.json").read_text())
    assert state["complete"] is False and len(state["uploaded"]) == 2

    assert cli_main(["publish", "--resume", str(run_dir)]) == 0  # store URL from the spool's target
    base = root / "runs" / "mxnet-bert" / "2026-01-02" / "mxnet-bert-20260102T030405-abc123"
    assert store_files(base) == spooled
    assert store.is_complete("mxnet-bert-20260102T030405-abc123")

    # a fresh publish of the same run dir yields the very same objects
    again = store.publish(run_dir)
    assert again.uploaded == [] and store_files(base) == spooled


def test_resume_refuses_a_tampered_spool(store, run_dir):
    store.publish(run_dir)
    (run_dir / SPOOL_DIR / "objects" / "report.md").write_text("changed")
    with pytest.raises(StoreError, match="does not match the manifest"):
        store.publish(run_dir, resume=True)


def test_publish_refuses_when_a_secret_survives(tmp_path):
    """A user name that redaction is told to keep (kinds without users) but that the check
    knows is refused... here: an IP slipped into a spooled file after redaction."""
    run_dir = make_run_dir(tmp_path / "w")
    s = Store.from_url(f"file://{tmp_path / 's'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    s.publish(run_dir)
    obj = run_dir / SPOOL_DIR / "objects" / "report.md"
    obj.write_text(obj.read_text() + "leak 10.11.0.2\n")
    manifest_p = run_dir / SPOOL_DIR / "objects" / "manifest.json"
    m = json.loads(manifest_p.read_text())
    for e in m["objects"]:
        if e["path"] == "report.md":
            e["size"], e["sha256"] = obj.stat().st_size, sha(obj)
    manifest_p.write_text(json.dumps(m))
    with pytest.raises(StoreError, match=r"refusing to publish report.md .*10\.11\.0\.2"):
        s.publish(run_dir, resume=True)


def test_read_api_list_runs_filters_and_get_run(store, tmp_path):
    ids = []
    for i, (day, med) in enumerate([("2026-01-01", 900.0), ("2026-01-05", 910.0), ("2026-01-09", 920.0)]):
        rd = make_run_dir(tmp_path / "w", run_id=f"r{i}", started_at=f"{day}T01:00:00+00:00", median=med)
        store.publish(rd)
        ids.append(f"r{i}")
    other = make_run_dir(tmp_path / "w2", run_id="p1", suite="pytorch-bert", started_at="2026-01-03T00:00:00Z")
    store.publish(other)
    assert store.suites() == ["mxnet-bert", "pytorch-bert"]
    runs = store.list_runs(suite="mxnet-bert")
    assert [r["run_id"] for r in runs] == ids
    assert [r["cells"]["mxnet-bert/bz32/fp32/1n8g"]["median_speed"] for r in runs] == [900.0, 910.0, 920.0]
    assert runs[0]["cells"]["mxnet-bert/bz32/fp32/1n8g"]["trial_values"] == [900.0, 903.8]
    assert [r["run_id"] for r in store.list_runs(since="2026-01-04")] == ["r1", "r2"]
    assert [r["run_id"] for r in store.list_runs()] == ["r0", "p1", "r1", "r2"]
    assert [r["run_id"] for r in store.list_runs(suite="mxnet-bert", limit=2)] == ["r1", "r2"]
    assert store.list_runs(status="failed") == []
    assert store.locate("r1")["path"] == "runs/mxnet-bert/2026-01-05/r1"
    assert store.read_manifest("r1")["run_id"] == "r1"
    assert store.read_report("r1").startswith("# mxnet-bert")
    with store.open_object("runs/mxnet-bert/2026-01-05/r1/report.md") as f:
        assert f.read().startswith(b"# mxnet-bert")

    out = store.get_run("r1", tmp_path / "fetched")
    m = json.loads((out / "manifest.json").read_text())
    for e in m["objects"]:
        assert sha(out / e["path"]) == e["sha256"]

    # corrupt one object in the store -> StoreError naming the key and both checksums
    target = tmp_path / "store" / "runs" / "mxnet-bert" / "2026-01-05" / "r1" / "report.md"
    good = next(e["sha256"] for e in m["objects"] if e["path"] == "report.md")
    target.write_text("corrupted")
    with pytest.raises(StoreError) as ei:
        store.get_run("r1", tmp_path / "fetched2")
    msg = str(ei.value)
    assert "runs/mxnet-bert/2026-01-05/r1/report.md" in msg and good in msg
    assert hashlib.sha256(b"corrupted").hexdigest() in msg
    with pytest.raises(StoreError, match="checksum mismatch"):
        store.read_report("r1")
    with pytest.raises(StoreError, match="not found"):
        store.read_result("nope")
    with pytest.raises(StoreError, match="invalid run id"):
        store.read_result("../etc")


def test_concurrent_publishers_never_lose_index_entries(tmp_path):
    s = Store.from_url(f"file://{tmp_path / 'store'}", retry=FAST)
    dirs = [make_run_dir(tmp_path / f"w{i}", run_id=f"c{i}", started_at=f"2026-02-0{i + 1}T00:00:00Z",
                         log_lines=5) for i in range(6)]
    errors = []

    def pub(d):
        try:
            s.publish(d)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=pub, args=(d,)) for d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r["run_id"] for r in s.list_runs(suite="mxnet-bert")) == [f"c{i}" for i in range(6)]


def test_bad_inputs_give_clear_errors(tmp_path):
    s = Store.from_url(f"file://{tmp_path / 'store'}")
    with pytest.raises(StoreError, match="does not exist"):
        s.publish(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="result.json not found"):
        s.publish(tmp_path / "empty")
    bad = make_run_dir(tmp_path / "w", run_id="ok-id")
    doc = json.loads((bad / "result.json").read_text())
    doc["run"]["run_id"] = "../../etc"
    (bad / "result.json").write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="invalid run id"):
        s.publish(bad)
    with pytest.raises(StoreError, match="no publish spool"):
        s.publish(tmp_path / "empty", resume=True)
    with pytest.raises(StoreError, match="credentials"):
        Store.from_url("s3://bucket/p?access_key=AKIA")
    with pytest.raises(StoreError, match="unsupported scheme"):
        Store.from_url("ftp://x/y")
    with pytest.raises(StoreError, match="unknown parameter"):
        Store.from_url("s3://bucket/p?endpont=http://x")


def test_store_urls_and_settings(tmp_path, monkeypatch):
    s = Store.from_url("s3://bkt/team/dlperf?endpoint=http://127.0.0.1:9&region=cn-hangzhou&addressing_style=virtual")
    assert s.backend.bucket == "bkt" and s.prefix == "team/dlperf"
    assert s.backend.settings.addressing_style == "virtual" and s.backend.settings.region == "cn-hangzhou"
    assert s.url() == ("s3://bkt/team/dlperf?endpoint=http%3A%2F%2F127.0.0.1%3A9&region=cn-hangzhou"
                       "&addressing_style=virtual")
    assert s.url("index/x.json") == "s3://bkt/team/dlperf/index/x.json"
    conn = {"conn_id": "dlperf_s3", "login": "AKIAEXAMPLE", "password": "sekret",
            "extra": json.dumps({"endpoint_url": "https://oss-cn-beijing.aliyuncs.com", "region_name": "cn-beijing",
                                 "addressing_style": "virtual", "bucket": "results"})}
    c = Store.from_connection(conn, prefix="nightly")
    st = c.backend.settings
    assert (st.bucket, st.endpoint_url, st.region, st.addressing_style, c.prefix) == \
        ("results", "https://oss-cn-beijing.aliyuncs.com", "cn-beijing", "virtual", "nightly")
    assert "sekret" not in repr(c) and "sekret" not in c.url() and "sekret" not in repr(st)
    monkeypatch.setenv("DLPERF_STORE_URL", f"file://{tmp_path}/d")
    assert Store.default().url() == f"file://{tmp_path}/d"
    assert Store.from_settings(None).url() == f"file://{tmp_path}/d"
    assert Store.from_settings(f"file://{tmp_path}/d", redaction="ips,hostnames").redaction == ("ips", "hostnames")
    local = Store.from_settings({"type": "local", "path": str(tmp_path / "l"), "prefix": "p", "retries": 3})
    assert local.retry.attempts == 3 and local.layout.index_key("s") == "p/index/s.json"


def test_cli_publish_and_errors_without_traceback(tmp_path):
    run_dir = make_run_dir(tmp_path / "w", log_lines=5)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    ok = subprocess.run([sys.executable, "-m", "dlperf_tasks", "publish", str(run_dir), "--store",
                         f"file://{tmp_path / 'st'}", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["run_id"] == "mxnet-bert-20260102T030405-abc123" and out["url"].startswith("file://")
    bad = subprocess.run([sys.executable, "-m", "dlperf_tasks", "publish", str(tmp_path / "nope"), "--store",
                          f"file://{tmp_path / 'st'}"], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert f"dlperf: error: run directory {tmp_path / 'nope'} does not exist" in bad.stderr


def test_leak_inside_the_tarball_alone_is_refused(tmp_path):
    """logs.tar.gz members that differ from the individually listed logs are scanned too."""
    import io

    run_dir = make_run_dir(tmp_path / "w", log_lines=5)
    s = Store.from_url(f"file://{tmp_path / 's'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    s.publish(run_dir)
    objects = run_dir / SPOOL_DIR / "objects"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"worker opsalice\n"
        info = tarfile.TarInfo("logs/_node-1_/bert_b32_fp32_1.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (objects / "logs.tar.gz").write_bytes(buf.getvalue())
    m = json.loads((objects / "manifest.json").read_text())
    for e in m["objects"]:
        if e["path"] == "logs.tar.gz":
            e["size"], e["sha256"] = len(buf.getvalue()), hashlib.sha256(buf.getvalue()).hexdigest()
    (objects / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(StoreError, match=r"logs.tar.gz:logs/_node-1_/bert_b32_fp32_1.log \(line 1\).*opsalice"):
        s.publish(run_dir, resume=True)


def test_binary_log_is_not_published_unredacted(tmp_path):
    run_dir = make_run_dir(tmp_path / "w", log_lines=5)
    (run_dir / "logs" / "core.bin").write_bytes(b"\x00\x01 10.11.0.2 \x00")
    s = Store.from_url(f"file://{tmp_path / 's'}", inventory=SAMPLE_INVENTORY, retry=FAST)
    s.publish(run_dir)
    m = s.read_manifest("mxnet-bert-20260102T030405-abc123")
    assert m["skipped"] == [{"path": "logs/core.bin", "reason": "binary file: cannot be redacted"}]
    assert "logs/core.bin" not in {e["path"] for e in m["objects"]}


def test_unknown_settings_keys_are_named(tmp_path):
    with pytest.raises(StoreError, match=r"unknown key\(s\) \['buckett'\]"):
        Store.from_settings({"type": "s3", "bucket": "b", "buckett": "x"})
    with pytest.raises(StoreError, match=r"unknown key\(s\) \['endpoint_url'\]"):
        Store.from_settings({"type": "local", "path": str(tmp_path), "endpoint_url": "http://x"})
    with pytest.raises(StoreError, match="addressing_style"):
        Store.from_settings({"type": "s3", "bucket": "b", "addressing_style": "vhost"})
    with pytest.raises(StoreError, match="no bucket"):
        Store.from_settings({"type": "s3", "endpoint_url": "http://x"})


def test_annotations_survive_republish_and_leave_objects_alone(store, run_dir, tmp_path):
    rid = "mxnet-bert-20260102T030405-abc123"
    store.publish(run_dir)
    manifest_before = store.read_manifest(rid)
    key = store.annotate_run(rid, "regressions", {"findings": [1, 2]}, index_value={"findings": 2})
    assert key.endswith(f"{rid}/annotations/regressions.json")
    assert store.read_annotation(rid, "regressions") == {"findings": [1, 2]}
    assert store.read_annotation(rid, "other") is None
    assert store.list_runs()[0]["regressions"] == {"findings": 2}
    again = store.publish(run_dir)
    assert again.uploaded == []
    assert store.read_manifest(rid) == manifest_before
    assert store.list_runs()[0]["regressions"] == {"findings": 2}  # kept across re-publish
    assert store.read_annotation(rid, "regressions") == {"findings": [1, 2]}
    with pytest.raises(StoreError, match="invalid annotation name"):
        store.annotate_run(rid, "../x", {})
