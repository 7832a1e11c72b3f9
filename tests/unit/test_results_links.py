"""Pure parts of the results page: who may read what, the links into Airflow, the run note
with the headline table, and the per-run downloads."""

import io

import pandas as pd
import pytest

from tests.fixtures import synth
from dlperf_tasks.web.access import AccessDenied, open_viewer, viewer_for
from dlperf_tasks.history.export import COLUMNS, run_csv, run_parquet, trial_rows
from dlperf_tasks.history.links import dag_run_results_url, dag_run_url, results_url, run_note, task_url
from dlperf_tasks.history.notify import failure_message, findings_message

SUITE_DAGS = {"mxnet-bert": "dlperf_mxnet", "mxnet-resnet50": "dlperf_mxnet", "smoke": "dlperf_smoke"}


def test_viewer_reads_the_suites_of_the_dags_it_may_read():
    asked = []

    def can(dag):
        asked.append(dag)
        return dag == "dlperf_mxnet"

    v = viewer_for("alice", SUITE_DAGS, can)
    assert v.can_read("mxnet-bert") and v.can_read("mxnet-resnet50")
    assert not v.can_read("smoke") and not v.can_read("outside-suite") and not v.can_read(None)
    assert asked.count("dlperf_mxnet") == 1  # one question per DAG
    assert viewer_for("ops", SUITE_DAGS, lambda dag: True).can_read("outside-suite")
    with pytest.raises(AccessDenied, match="'bob' may not read the dlperf DAGs"):
        viewer_for("bob", SUITE_DAGS, lambda dag: False)
    assert open_viewer().can_read("anything")


def test_links_quote_run_ids():
    rid = "scheduled__2026-01-31T01:00:00+00:00"
    assert dag_run_url("http://h:8080/", "dlperf_mxnet", rid) == \
        "http://h:8080/dags/dlperf_mxnet/runs/scheduled__2026-01-31T01%3A00%3A00%2B00%3A00"
    assert task_url("", "d", "r/x", "publish") == "/dags/d/runs/r%2Fx/tasks/publish"
    assert results_url("http://h:8080", "run 1") == "http://h:8080/dlperf/runs/run%201"
    assert dag_run_results_url("", "dlperf_smoke", "manual__x+1") == "/dlperf/dag-runs/dlperf_smoke/manual__x%2B1"


def test_run_note_has_headline_table_and_results_link():
    res = synth.nightly_results(1)[0]
    res["cells"][0]["cv"] = 0.42
    note = run_note([{"run_id": res["run"]["run_id"], "suite": "mxnet-bert", "cells": res["cells"],
                      "regressions": {"findings": 1, "cells": ["scaling:x"]}}], "http://h:8080")
    lines = note.splitlines()
    assert lines[0] == f"**mxnet-bert** run `{res['run']['run_id']}`: [results](http://h:8080/dlperf/runs/{res['run']['run_id']})"
    assert "**1 regression finding(s)**: scaling:x" in note
    rows = [l for l in lines if l.startswith("| 1n1g bz24")]
    assert len(rows) == 1 and "| noisy: CV 42.00% > 5% |" in rows[0] and "samples/s" in rows[0]
    assert sum(1 for l in lines if l.startswith("| ") and "bz" in l) == 8
    assert run_note([], "http://h") == "no run published\n"


def test_downloads_one_row_per_trial():
    res = synth.nightly_results(1, trials=3)[0]
    rows = trial_rows(res)
    assert len(rows) == 8 * 3 and set(rows[0]) == set(COLUMNS)
    csv = run_csv(res).splitlines()
    assert csv[0] == ",".join(COLUMNS) and len(csv) == 25
    df = pd.read_parquet(io.BytesIO(run_parquet(res)))
    assert list(df.columns) == COLUMNS and len(df) == 24 and df["valid"].all()


def test_messages():
    m = findings_message({"run_id": "r", "suite": "s", "findings": [
        {"kind": "throughput", "cell_id": "c", "baseline": 100, "current": 94, "unit": "samples/s",
         "delta_pct": -6.0, "ci_pct": [-8.0, -4.0]}]}, "http://x/dlperf/runs/r")
    assert m["subject"] == "dlperf: 1 regression(s) in s run r" and "[-8.00, -4.00]%" in m["text"]
    # a "fast but wrong?" finding says its note (final loss, band); a zero history median has no change %
    note = "fast but wrong? final loss 0.31 is outside the band [-0.05, 0.05] of 3 earlier runs"
    m = findings_message({"run_id": "r", "suite": "s", "findings": [
        {"kind": "loss", "status": "fast but wrong?", "cell_id": "c", "baseline": 0.0, "current": 0.31,
         "unit": "loss", "delta_pct": None, "note": note}]})
    assert m["text"].splitlines()[1] == f"- LOSS c: {note}"
    m = findings_message({"run_id": "r", "suite": "s", "findings": [
        {"kind": "throughput", "cell_id": "c", "baseline": 0.0, "current": 3.0, "unit": "samples/s", "delta_pct": None}]})
    assert "(change n/a)" in m["text"]
    f = failure_message("dlperf_smoke", "manual__1", "trial", "boom", "http://x/dags/dlperf_smoke/runs/manual__1/tasks/trial")
    assert f["subject"] == "dlperf: task trial of dlperf_smoke run manual__1 failed" and "logs: http://x" in f["text"]


def test_run_note_names_cells_of_the_aggregate_summaries():
    """The DAG's publish task builds the note from the aggregate summaries, whose
    cells carry only ``cell_id`` (engine.outputs.cell_rows): no cell may read ``1n1g bz?``."""
    from dlperf_tasks.engine.outputs import cell_rows

    res = synth.nightly_results(1)[0]
    note = run_note([{"run_id": res["run"]["run_id"], "suite": "mxnet-bert", "cells": cell_rows(res)}], "http://h")
    rows = [line for line in note.splitlines() if line.startswith("| ") and "/" in line.split("|")[1]]
    assert "bz?" not in note and len(rows) == len(res["cells"]), note
    for c in res["cells"]:
        assert f"| {c['cell_id'].split('/', 1)[1]} |" in note
