"""Unique run ids from every producer, and publish never silently replaces a
different run stored under the same id (real local store, real files, real extraction)."""

import json
import shutil
from pathlib import Path

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.cli import main as cli_main
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.measure.extract import extract_tree
from dlperf_tasks.core.model import Window
from dlperf_tasks.store import RetryPolicy, Store
from dlperf_tasks.report.result_json import extract_result
from tests.fixtures.s3 import SAMPLE_INVENTORY, make_run_dir

FIX = Path(__file__).resolve().parent.parent / "data" / "fixture_logs"
FAST = RetryPolicy(attempts=1, base_delay=0.0, max_delay=0.0)
RID = "mxnet-bert-20260102T030405-abc123"


@pytest.fixture
def store(tmp_path):
    return Store.from_url(f"file://{tmp_path / 'store'}", inventory=SAMPLE_INVENTORY, retry=FAST)


def _extract(tree: Path):
    return extract_tree(load_suite("mxnet-bert"), tree, 32, Window(100, 100))


def test_two_extractions_of_one_suite_get_two_ids_and_the_same_logs_one(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIX / "mxnet_bert" / "bz32", a)
    shutil.copytree(FIX / "mxnet_bert" / "bz32" / "1n1g", b / "1n1g")  # another archive: one cell only
    ra, rb, ra2 = _extract(a), _extract(b), _extract(a)
    ida, idb = extract_result(ra)["run"]["run_id"], extract_result(rb)["run"]["run_id"]
    assert ida.startswith("extract-mxnet-bert-") and idb.startswith("extract-mxnet-bert-")
    assert ida != idb  # old code: both 'extract-mxnet-bert' -> the second publish replaced the first
    assert extract_result(ra2)["run"]["run_id"] == ida  # the same logs again: the same id (re-publish is a no-op)
    c = tmp_path / "c"
    shutil.copytree(a, c)  # the same logs elsewhere: still the same id (no absolute path in the digest)
    assert extract_result(_extract(c))["run"]["run_id"] == ida


def test_publish_refuses_a_different_run_under_a_taken_id_naming_both(store, tmp_path):
    first = make_run_dir(tmp_path / "one", run_id=RID, started_at="2026-01-02T03:04:05+00:00", median=900.0)
    second = make_run_dir(tmp_path / "two", run_id=RID, started_at="2026-01-05T03:04:05+00:00", median=500.0)
    store.publish(first)
    store.publish(first)  # the same run again: harmless, as before
    with pytest.raises(StoreError) as exc:
        store.publish(second)
    msg = str(exc.value)
    assert RID in msg and "2026-01-02T03:04:05" in msg and "2026-01-05T03:04:05" in msg and "--replace" in msg
    assert "runs/mxnet-bert/2026-01-02/" in msg and "runs/mxnet-bert/2026-01-05/" in msg
    rows = store.list_runs(suite="mxnet-bert")
    assert [r["started_at"] for r in rows] == ["2026-01-02T03:04:05+00:00"]  # the first run kept
    store.publish(second, replace=True)
    assert [r["started_at"] for r in store.list_runs(suite="mxnet-bert")] == ["2026-01-05T03:04:05+00:00"]


def test_publish_refuses_same_path_different_start(store, tmp_path):
    first = make_run_dir(tmp_path / "one", run_id=RID, started_at="2026-01-02T03:04:05+00:00")
    other = make_run_dir(tmp_path / "two", run_id=RID, started_at="2026-01-02T09:00:00+00:00")
    store.publish(first)
    with pytest.raises(StoreError, match="already taken"):
        store.publish(other)


def test_cli_publish_replace_flag(tmp_path, capsys):
    url = f"file://{tmp_path / 'store'}"
    first = make_run_dir(tmp_path / "one", run_id=RID, started_at="2026-01-02T03:04:05+00:00")
    second = make_run_dir(tmp_path / "two", run_id=RID, started_at="2026-01-03T03:04:05+00:00")
    assert cli_main(["publish", str(first), "--store", url, "--inventory", _inventory(tmp_path)]) == 0
    capsys.readouterr()
    assert cli_main(["publish", str(second), "--store", url, "--inventory", _inventory(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already taken" in err and "--replace" in err and "Traceback" not in err
    assert cli_main(["publish", str(second), "--store", url, "--inventory", _inventory(tmp_path), "--replace"]) == 0


def _inventory(tmp_path: Path) -> str:
    p = tmp_path / "inventory.json"
    if not p.exists():
        p.write_text(json.dumps(SAMPLE_INVENTORY) if not isinstance(SAMPLE_INVENTORY, str) else SAMPLE_INVENTORY)
    return str(p)


def test_results_get_and_check_accept_latest_and_a_prefix(store, tmp_path, capsys):
    """Old code: 'latest' and a prefix were rejected by get and check (accepted by show/compare)."""
    url = f"file://{tmp_path / 'store'}"
    store.publish(make_run_dir(tmp_path / "one", run_id=RID))
    for spec in ("latest", "mxnet-bert-20260102"):
        out = tmp_path / f"got-{spec}"
        assert cli_main(["results", "get", spec, "--to", str(out), "--store", url]) == 0
        assert RID in capsys.readouterr().out
        assert (out / "result.json").is_file() or any(out.rglob("result.json"))
        assert cli_main(["results", "check", spec, "--store", url]) == 0
        assert RID in capsys.readouterr().out
