"""bench/bench_load_celery.py: the latency/makespan arithmetic on known task instance times, and
the stand-in suite it writes plans the asked number of trials."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_load_celery.py"


def _bench():
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_load_celery", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(task, start, end, queued=None):
    return {"task_id": task, "start_date": start, "end_date": end, "queued_dttm": queued}


def test_latency_pairs_each_freed_slot_with_the_next_start_and_bounds_the_makespan():
    b = _bench()
    rows = [_row("prepare", -2.0, -0.5), _row("trial", 0, 4), _row("trial", 0, 4), _row("trial", 4.5, 8.5, 4.2),
            _row("trial", 5, 9, 4.1), _row("trial", 9, 13, 8.6), _row("trial", 9.5, 13, 9.3)]
    res = b.analyse(rows, capacity=2, trial_s=3.0)
    assert res["latencies_s"] == [0.5, 1.0, 0.5, 0.5]  # starts 4.5, 5, 9, 9.5 after ends 4, 4, 8.5, 9
    assert res["latency_median_s"] == 0.5 and res["latency_max_s"] == 1.0
    assert res["latency_to_queued_median_s"] == pytest.approx(0.15)
    assert res["peak_concurrency"] == 2 and res["first_start_after_prepare_s"] == 0.5
    assert res["makespan_s"] == 13 and res["bound_s"] == 11.75  # (5 x 4 s + 3.5 s) / 2 slots
    assert res["makespan_ratio"] == pytest.approx(13 / 11.75, abs=1e-3)
    assert res["runtime_bound_s"] == 9.0


def test_the_longest_task_bounds_a_run_with_few_trials():
    res = _bench().analyse([_row("trial", 0, 10), _row("trial", 0, 2)], capacity=4, trial_s=1.0)
    assert res["bound_s"] == 10 and res["latency_n"] == 0 and res["latency_median_s"] is None


def test_load_suite_plans_the_asked_trials(tmp_path, monkeypatch):
    b = _bench()
    assert b.write_catalog(tmp_path, 693, 2.0) == 693
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.plan import plan

    suite = load_suite("load")
    assert suite.framework == "load_standin" and len(plan(suite).trials) == 693
    assert b.write_catalog(tmp_path, 5, 2.0) == 5
