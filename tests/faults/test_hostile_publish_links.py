"""Hostile input, round 2: ``dlperf publish`` never uploads content from
outside the run directory, and two publishes of one run directory never crash each other.

A local user plants, in a run directory: symbolic links (a log, a plot, ``report.md``, the
whole ``logs/``, ``result.json`` itself), a hard link to a file outside, a FIFO and a socket.
Publish skips and names each one and no byte of the outside files reaches the store. Two
``dlperf publish`` processes of one run directory serialise on a lock in the run directory
(the second says it waits), so neither rebuilds the spool under the other.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import Store
from tests.fixtures.s3 import make_run_dir

ROOT = Path(__file__).resolve().parents[2]
RID = "mxnet-bert-20260102T030405-links"
SECRET = "OUTSIDE-CONTENT-7f3a9c"


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "dir").mkdir(parents=True)
    for name in ("secret.log", "hard.log", "report.md", "img.png", "dir/inner.log"):
        (out / name).write_text(f"{SECRET} {name}\n")
    return out


def _store_text(store_dir: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in store_dir.rglob("*") if p.is_file())


def test_publish_skips_and_names_links_hard_links_and_special_files(tmp_path, monkeypatch, capsys):
    out = _outside(tmp_path)
    run_dir = make_run_dir(tmp_path / "runs", run_id=RID)
    planted = run_dir / "logs" / "planted"
    planted.mkdir()
    (planted / "link.log").symlink_to(out / "secret.log")
    (planted / "dirlink").symlink_to(out / "dir", target_is_directory=True)
    os.link(out / "hard.log", planted / "hard.log")
    os.mkfifo(planted / "fifo.log")
    monkeypatch.chdir(planted)  # a relative name keeps the socket path short
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.log")
    monkeypatch.chdir(tmp_path)
    (run_dir / "plots" / "link.png").symlink_to(out / "img.png")
    (run_dir / "report.md").unlink()
    (run_dir / "report.md").symlink_to(out / "report.md")
    store_dir = tmp_path / "store"
    try:
        rc = main(["publish", str(run_dir), "--store", f"file://{store_dir}"])
    finally:
        sock.close()
    err = capsys.readouterr().err
    assert rc == 0, err
    assert SECRET not in _store_text(store_dir)
    expected = {"logs/planted/link.log": "symbolic link", "logs/planted/dirlink": "symbolic link",
                "logs/planted/hard.log": "hard link", "logs/planted/fifo.log": "FIFO",
                "logs/planted/sock.log": "socket", "plots/link.png": "symbolic link", "report.md": "symbolic link"}
    for path, reason in expected.items():
        assert f"not published: {path}: {reason}" in err, (path, err)
    manifest = json.loads(next(store_dir.rglob("manifest.json")).read_text())
    assert {s["path"] for s in manifest["skipped"]} >= set(expected)
    published = {e["path"] for e in manifest["objects"]}
    assert "report.md" not in published and not any("planted" in p for p in published)
    assert "result.json" in published and "logs/gpu-node-a/bert_b32_fp32_1.log" in published


def test_a_linked_logs_dir_is_not_followed(tmp_path):
    out = _outside(tmp_path)
    run_dir = make_run_dir(tmp_path / "runs", run_id=RID)
    real = tmp_path / "moved-logs"
    (run_dir / "logs").rename(real)
    (run_dir / "logs").symlink_to(out / "dir", target_is_directory=True)
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    res = store.publish(run_dir)
    assert SECRET not in _store_text(tmp_path / "store")
    assert {"path": "logs", "reason": "symbolic link"} in res.not_published


def test_a_linked_result_json_is_refused_in_one_line(tmp_path):
    out = _outside(tmp_path)
    run_dir = make_run_dir(tmp_path / "runs", run_id=RID)
    (out / "result.json").write_text((run_dir / "result.json").read_text())
    (run_dir / "result.json").unlink()
    (run_dir / "result.json").symlink_to(out / "result.json")
    with pytest.raises(StoreError, match="result.json: symbolic link; refusing to publish") as ei:
        Store.from_url(f"file://{tmp_path / 'store'}").publish(run_dir)
    assert "\n" not in str(ei.value)
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("manifest.json"))


def _cli(run_dir: Path, store_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlperf_tasks", "publish", str(run_dir), "--store",
                             f"file://{store_dir}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_second_publish_of_one_run_dir_waits_for_the_first(tmp_path):
    """Deterministic: publish A stops after its first object; publish B (another process) of the
    same run dir must say it waits (it holds nothing, rebuilds nothing) and finish after A."""
    run_dir = make_run_dir(tmp_path / "runs", run_id=RID)
    store_dir = tmp_path / "store"
    store = Store.from_url(f"file://{store_dir}")
    seen: dict = {}

    def on_uploaded(key: str, n: int) -> None:
        if n != 1:
            return
        spool_manifest = (run_dir / "publish-spool" / "objects" / "manifest.json").read_bytes()
        b = _cli(run_dir, store_dir)
        lines = []
        for line in b.stderr:  # until B says it waits, or ends (it must not)
            lines.append(line)
            if "waiting for it to finish" in line:
                break
        seen.update(b=b, lines=lines,
                    untouched=(run_dir / "publish-spool" / "objects" / "manifest.json").read_bytes() == spool_manifest)

    res = store.publish(run_dir, on_uploaded=on_uploaded)
    b = seen["b"]
    rest_out, rest_err = b.communicate(timeout=120)
    err = "".join(seen["lines"]) + rest_err
    assert any("another publish of" in line and "waiting" in line for line in seen["lines"]), err
    assert seen["untouched"], "B rebuilt the spool while A was uploading it"
    assert b.returncode == 0 and "Traceback" not in err, err
    assert res.run_id == RID and "published" in rest_out


def test_concurrent_cli_publishes_never_crash(tmp_path):
    run_dir = make_run_dir(tmp_path / "runs", run_id=RID)
    store_dir = tmp_path / "store"
    procs = [_cli(run_dir, store_dir) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in e, e
    index = json.loads((store_dir / "index" / "mxnet-bert.json").read_text())
    assert [r["run_id"] for r in index["runs"]] == [RID]
    assert Store.from_url(f"file://{store_dir}").get_run(RID, tmp_path / "back").is_dir()  # checksums agree
