"""Hostile input, round 2: ``dlperf results get`` and the results readers
never trust the S3 endpoint nor the destination directory.

The endpoint is a hostile HTTP server on 127.0.0.1 (tests/fixtures/hostile_s3.py) reached
through the real boto3 client: a body that never ends, a body dripping one byte at a time, a
cut body, a 2 GiB result.json or manifest, an index of 200,000 runs. Every download is bounded
by the manifest's size plus one byte, an overall deadline and a minimum-progress rule, fails in
one line and leaves no ``.part`` file; nothing is written through a link planted in ``--to DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import Store
from tests.fixtures import hostile_s3 as H
from tests.fixtures.s3 import make_run_dir

ROOT = Path(__file__).resolve().parents[2]
RID = "mxnet-bert-20260102T030405-hostile"
LOGS = b"L" * 1000
RESULT = json.dumps({"run": {"run_id": RID, "suite": "mxnet-bert"}, "cells": []}).encode()
CREDS = {"DLPERF_S3_ACCESS_KEY_ID": "AKIATESTTESTTEST", "DLPERF_S3_SECRET_ACCESS_KEY": "not-a-real-secret-0000"}
FAST = {"DLPERF_STORE_STALL_S": "1", "DLPERF_STORE_DEADLINE_S": "4"}


@pytest.fixture
def hostile(monkeypatch):
    for k, v in {**CREDS, **FAST}.items():
        monkeypatch.setenv(k, v)
    with H.HostileS3() as server:
        yield server


def _store(server) -> Store:
    return Store.from_url(server.store_url())


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*") if p.name.endswith(".part"))


def _one_line(msg: str) -> None:
    assert "\n" not in msg and "Traceback" not in msg, msg


def test_endless_body_reads_at_most_the_manifest_size_plus_one(hostile, tmp_path):
    base = hostile.publish_run(RID, {"logs.tar.gz": H.endless()}, {"logs.tar.gz": H.entry(LOGS)})
    dest = tmp_path / "got"
    with pytest.raises(StoreError) as ei:
        _store(hostile).get_run(RID, dest)
    _one_line(str(ei.value))
    assert "more than the expected 1000 bytes" in str(ei.value)
    # what reached the disk: nothing (no .part, no logs.tar.gz); what was read: size + 1 (+ socket buffers)
    assert _leftovers(dest) == [] and not (dest / "logs.tar.gz").exists() and not (dest / "manifest.json").exists()
    assert hostile.wait_done(f"{base}/logs.tar.gz")  # the server stops at 32 MiB if nobody stops reading
    assert hostile.sent.get(f"{base}/logs.tar.gz", 0) < 4 << 20


@pytest.mark.parametrize("every_s", [0.2, 3.0], ids=["drip-fast", "drip-slow"])
def test_dripping_body_fails_within_the_stall_timeout(hostile, tmp_path, every_s):
    hostile.publish_run(RID, {"logs.tar.gz": H.drip(every_s, 1000)}, {"logs.tar.gz": H.entry(LOGS)})
    dest = tmp_path / "got"
    t0 = time.monotonic()
    with pytest.raises(StoreError) as ei:
        _store(hostile).get_run(RID, dest)
    took = time.monotonic() - t0
    _one_line(str(ei.value))
    assert took < 4.0, f"took {took:.1f} s (stall timeout 1 s)"
    assert "stall" in str(ei.value) or "no data within" in str(ei.value), str(ei.value)
    assert _leftovers(dest) == []


def test_overall_deadline_bounds_a_slow_but_steady_download(hostile, tmp_path, monkeypatch):
    # each second brings more than min_bytes (so the stall rule is content) but the deadline is 1.5 s
    monkeypatch.setenv("DLPERF_STORE_MIN_BYTES", "1")
    monkeypatch.setenv("DLPERF_STORE_DEADLINE_S", "1.5")
    hostile.publish_run(RID, {"logs.tar.gz": H.drip(0.1, 1000)}, {"logs.tar.gz": H.entry(LOGS)})
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="deadline"):
        _store(hostile).get_run(RID, tmp_path / "got")
    assert time.monotonic() - t0 < 4.0
    assert _leftovers(tmp_path / "got") == []


def test_cut_body_is_one_line_on_the_cli_and_leaves_no_part_file(hostile, tmp_path):
    hostile.publish_run(RID, {"logs.tar.gz": H.cut(LOGS, 400), "result.json": H.ok(RESULT)},
                        {"logs.tar.gz": H.entry(LOGS), "result.json": H.entry(RESULT)})
    dest = tmp_path / "got"
    env = {**os.environ, **CREDS, **FAST, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "dlperf_tasks", "results", "get", RID, "--to", str(dest),
                        "--store", hostile.store_url()], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "IncompleteRead" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("dlperf: error:")]
    assert len(errors) == 1 and "logs.tar.gz" in errors[0], p.stderr
    assert _leftovers(dest) == [] and not (dest / "logs.tar.gz").exists()
    assert CREDS["DLPERF_S3_SECRET_ACCESS_KEY"] not in p.stderr + p.stdout


def test_huge_result_json_and_manifest_are_refused_before_they_are_read(hostile):
    two_gib = 2 << 30
    hostile.publish_run(RID, {"result.json": H.endless()}, {"result.json": (two_gib, "0" * 64)})
    store = _store(hostile)
    with pytest.raises(StoreError, match="refused before reading it") as ei:
        store.read_result(RID)
    _one_line(str(ei.value))
    assert hostile.gets(f"runs/mxnet-bert/2026-01-02/{RID}/result.json") == 0
    # a manifest whose HEAD says 3 GiB: refused on its size, never fetched
    other = RID + "-m"
    base = f"runs/mxnet-bert/2026-01-02/{other}"
    hostile.objects[f"{base}/manifest.json"] = H.head_says(3 << 30)
    hostile.publish_run(other, {}, {})
    with pytest.raises(StoreError, match="the manifest is 3.0 GiB"):
        store.read_manifest(other)
    assert hostile.gets(f"{base}/manifest.json") == 0


def test_results_page_refuses_a_huge_result_json_without_reading_it(hostile):
    from fastapi.testclient import TestClient

    from dlperf_tasks.web.access import Viewer
    from dlperf_tasks.web.app import create_app

    hostile.publish_run(RID, {"result.json": H.endless()}, {"result.json": (2 << 30, "0" * 64)})
    store = _store(hostile)
    app = create_app(lambda: store, authorize=lambda: Viewer(name="t", suites=frozenset(), other_suites=True,
                                                             known=frozenset()))
    c = TestClient(app)
    for path in (f"/runs/{RID}/files/result.json", f"/runs/{RID}", f"/runs/{RID}/download.json"):
        r = c.get(path)
        assert r.status_code == 502 and "refused before reading it" in r.text, (path, r.status_code, r.text[:300])
    assert hostile.gets(f"runs/mxnet-bert/2026-01-02/{RID}/result.json") == 0


def _big_index(n: int) -> bytes:
    rows = ",".join(json.dumps({"run_id": f"r{i:06d}", "suite": "mxnet-bert", "date": "2026-01-02",
                                "started_at": f"2026-01-02T00:00:00.{i:06d}+00:00", "status": "ok",
                                "path": f"runs/mxnet-bert/2026-01-02/r{i:06d}", "framework": "mxnet_bert",
                                "cells": {"c": {"median_speed": 1.0, "n_valid": 3}}}) for i in range(n))
    return ('{"runs": [' + rows + '], "schema_version": 1, "suite": "mxnet-bert"}').encode()


_MEASURE = r"""
import json, resource, sys
from fastapi.testclient import TestClient
from dlperf_tasks.cli import main
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.app import create_app
from dlperf_tasks.store import Store

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10

url = sys.argv[1]
base = peak()
rc = main(["results", "ls", "--store", url, "--limit", "3", "--format", "json"])
cli = peak() - base
store = Store.from_url(url)
app = create_app(lambda: store, authorize=lambda: Viewer(name="t", suites=frozenset(), other_suites=True,
                                                         known=frozenset()))
client = TestClient(app)
page, api = client.get("/"), client.get("/api/runs?limit=2")
out = {"rc": rc, "cli": cli, "web": peak() - base, "page": page.status_code, "page_text": page.text,
       "api": [r["run_id"] for r in api.json()]}
print("\n" + json.dumps(out))
"""


def test_an_index_of_200000_runs_is_read_in_bounded_pages(tmp_path):
    """``results ls`` and the page hold only the rows they show: the 50 MB index is read in
    1 MiB pages (the process's peak memory grows by a few MiB, not by the ~300 MiB the
    whole document takes as Python objects)."""
    store_dir = tmp_path / "store"
    (store_dir / "index").mkdir(parents=True)
    (store_dir / "index" / "mxnet-bert.json").write_bytes(_big_index(200_000))
    p = subprocess.run([sys.executable, "-c", _MEASURE, f"file://{store_dir}"], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    rows = json.loads("\n".join(lines[:-1]))
    assert out["rc"] == 0 and [r["run_id"] for r in rows] == ["r199999", "r199998", "r199997"]
    assert out["cli"] < 40 << 20, f"results ls grew the process by {out['cli'] >> 20} MiB to list 3 runs"
    assert out["page"] == 200 and "r199999" in out["page_text"] and "200000 run(s)" in out["page_text"]
    assert out["api"] == ["r199998", "r199999"]
    assert out["web"] < 60 << 20, f"the page grew the process by {out['web'] >> 20} MiB"


def test_an_index_above_the_bound_is_refused_on_its_size(tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    (store_dir / "index").mkdir(parents=True)
    (store_dir / "index" / "mxnet-bert.json").write_bytes(_big_index(50))
    monkeypatch.setenv("DLPERF_STORE_MAX_INDEX_BYTES", "1000")
    with pytest.raises(StoreError, match="the index is .* more than the 1000 bytes"):
        Store.from_url(f"file://{store_dir}").list_runs(suite="mxnet-bert")


def test_get_never_writes_through_links_planted_in_the_destination(tmp_path):
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    run_dir = make_run_dir(tmp_path / "runs", run_id=RID)
    store.publish(run_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me\n")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "logs").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreError, match="'logs' is a symbolic link"):
        store.get_run(RID, dest)
    (dest / "logs").unlink()
    (dest / "result.json.part").symlink_to(victim)
    (dest / "manifest.json").symlink_to(victim)
    with pytest.raises(StoreError, match="manifest.json.*symbolic link"):
        store.get_run(RID, dest)
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"] and victim.read_text() == "keep me\n"
    (dest / "manifest.json").unlink()
    store.get_run(RID, dest)  # links gone: the download completes, the planted .part link untouched
    assert (dest / "manifest.json").is_file() and not (dest / "manifest.json").is_symlink()
    assert victim.read_text() == "keep me\n" and (dest / "result.json.part").is_symlink()
    assert [p for p in _leftovers(dest) if p != "result.json.part"] == []
