"""Store key layout (store/layout.py): key names and path-safety of run ids, suites, paths."""

import pytest

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.layout import Layout, date_of, validate_relpath, validate_run_id, validate_suite


def test_keys_follow_the_documented_layout():
    lay = Layout("team/dlperf/")
    assert lay.prefix == "team/dlperf"
    assert lay.run_prefix("mxnet-bert", "2026-01-02", "r1") == "team/dlperf/runs/mxnet-bert/2026-01-02/r1/"
    assert lay.manifest_key("mxnet-bert", "2026-01-02", "r1") == "team/dlperf/runs/mxnet-bert/2026-01-02/r1/manifest.json"
    assert lay.run_key("s", "2026-01-02", "r1", "plots/x.png") == "team/dlperf/runs/s/2026-01-02/r1/plots/x.png"
    assert lay.index_key("mxnet-bert") == "team/dlperf/index/mxnet-bert.json"
    assert lay.pointer_key("r1") == "team/dlperf/index/runs/r1.json"
    assert lay.key_for_path("runs/s/2026-01-02/r1", "result.json") == "team/dlperf/runs/s/2026-01-02/r1/result.json"
    assert lay.suite_of_index_key("team/dlperf/index/mxnet-bert.json") == "mxnet-bert"
    assert lay.suite_of_index_key("team/dlperf/index/runs/r1.json") is None
    assert Layout("").index_key("s") == "index/s.json"


def test_upload_order_logs_first_manifest_last():
    names = ["manifest.json", "plots/a.png", "result.json", "logs/n/x.log", "report.md", "logs.tar.gz"]
    ordered = sorted(names, key=Layout.upload_rank)
    assert ordered[:2] == ["logs.tar.gz", "logs/n/x.log"]
    assert ordered[-1] == "manifest.json"
    assert ordered.index("result.json") < ordered.index("report.md") < ordered.index("plots/a.png")


@pytest.mark.parametrize("bad", ["", "../x", "..", "a/b", "a\x00b", "a\nb", "a b", ".hidden", "x..y",
                                 "a\\b", "-x", "é", "x" * 201])
def test_bad_run_ids_are_rejected(bad):
    with pytest.raises(StoreError, match="invalid run id"):
        validate_run_id(bad)


@pytest.mark.parametrize("good", ["r1", "mxnet-bert-20260102T030405-abc123",
                                  "manual__2026-01-02T03:04:05.123+00:00", "scheduled__2026-01-02T00:00:00+00:00"])
def test_airflow_style_run_ids_are_accepted(good):
    assert validate_run_id(good) == good


@pytest.mark.parametrize("bad", ["", "a/b", "..", "A b", "x\n"])
def test_bad_suites_are_rejected(bad):
    with pytest.raises(StoreError, match="invalid suite"):
        validate_suite(bad)


@pytest.mark.parametrize("bad", ["/abs", "a//b", "a/../b", "./a", "a/", "a\\b", "a/\x00"])
def test_bad_relative_paths_are_rejected(bad):
    with pytest.raises(StoreError):
        validate_relpath(bad)


def test_bad_date_and_prefix():
    with pytest.raises(StoreError, match="YYYY-MM-DD"):
        Layout().run_path("s", "2026-1-2", "r")
    with pytest.raises(StoreError, match="calendar"):
        Layout().run_path("s", "2026-02-30", "r")
    with pytest.raises(StoreError):
        Layout("a/../b")


def test_date_of_uses_utc():
    assert date_of("2026-01-02T23:30:00-02:00") == "2026-01-03"
    assert date_of("2026-01-02T03:04:05Z") == "2026-01-02"
    with pytest.raises(StoreError, match="ISO-8601"):
        date_of("yesterday")
