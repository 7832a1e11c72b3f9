"""A run with odd but schema-valid values already in the store (written before publish checked
them: here written straight into a local store) never gives a 500 or a traceback: the run page,
the index, compare and trend answer a page or a one-line error, and ``dlperf results show``
prints one line."""

from __future__ import annotations

import hashlib
import json

import pytest
from fastapi import Header
from fastapi.testclient import TestClient

from dlperf_tasks.cli import main as cli_main
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.app import create_app
from tests.fixtures.s3 import make_run_dir
from tests.unit.test_bad_run_isolation import HOSTILE, _store

GOOD = "mxnet-bert-20260102T030405-aaaaaa"
BAD = "mxnet-bert-20260103T030405-bbbbbb"
CELL = "mxnet-bert/bz32/fp32/1n8g"


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_stored_run_with_odd_values_gives_pages_and_one_line_never_a_500(tmp_path, capsys, case):
    store = _store(tmp_path)
    store.publish(make_run_dir(tmp_path / "w1", run_id=GOOD, log_lines=2))
    store.publish(make_run_dir(tmp_path / "w2", run_id=BAD, started_at="2026-01-03T03:04:05+00:00", log_lines=2))
    root = tmp_path / "store"
    (result,) = [p for p in root.rglob("result.json") if BAD in str(p)]
    result.write_text(HOSTILE[case](result.read_text()))
    manifest = result.parent / "manifest.json"  # as publish would have recorded it, before the check
    doc = json.loads(manifest.read_text())
    for entry in doc["objects"]:
        if entry["path"] == "result.json":
            entry.update(size=result.stat().st_size, sha256=hashlib.sha256(result.read_bytes()).hexdigest())
    manifest.write_text(json.dumps(doc))
    index = next(root.rglob("index/mxnet-bert.json"))
    index.write_text(HOSTILE[case](index.read_text()))

    def authorize(x_user: str | None = Header(default=None)):
        return Viewer(name="bob", suites=frozenset({"mxnet-bert"}), other_suites=False,
                      known=frozenset({"mxnet-bert"}))

    client = TestClient(create_app(lambda: store, authorize=authorize), raise_server_exceptions=False)
    for url in ("/", f"/runs/{BAD}", f"/runs/{GOOD}", f"/compare?b={BAD}", f"/compare?b={GOOD}&a={BAD}",
                f"/compare?b={BAD}&a={GOOD}", f"/trend?suite=mxnet-bert&cell={CELL}", "/api/runs"):
        r = client.get(url)
        assert r.status_code != 500 and "Traceback" not in r.text, (url, r.status_code, r.text[:300])
        if r.status_code != 200:  # an error page in one line
            assert "\n" not in r.json()["detail"], (url, r.text[:300])

    code = cli_main(["results", "show", BAD, "--store", f"file://{root}"])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 0 or len([ln for ln in err.splitlines() if "error" in ln]) == 1, (code, err)
