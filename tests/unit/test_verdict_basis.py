"""A verdict states its basis. A run without history is "not judged (no history)"
on every surface (results check / show, the results page, the notification, the run note,
make run's summary), never "no regression" / "N cell(s) checked", and the counts are the same
everywhere because history/basis.py makes them."""

import json
import re

import pytest
from fastapi.testclient import TestClient

from dlperf_tasks.cli import main as cli_main
from dlperf_tasks.history import check
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.history.basis import basis_line, basis_of, summarize
from dlperf_tasks.history.links import run_note
from dlperf_tasks.history.regress import RegressConfig
from dlperf_tasks.history.notify import findings_message
from dlperf_tasks.web.app import create_app
from dlperf_tasks.store import Store
from tests.fixtures import synth
from tests.fixtures.s3 import make_run_dir


@pytest.fixture
def lone(tmp_path):
    """A store holding one run of one cell: nothing to judge it against."""
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    store.publish(make_run_dir(tmp_path / "w", log_lines=3))
    return store, "mxnet-bert-20260102T030405-abc123"


def test_a_run_without_history_is_not_judged_on_every_surface(lone, capsys):
    store, rid = lone
    rep = check.check_run(store, rid, log=None, notify_target="")
    b = rep.basis
    assert (b["cells"], b["judged"], b["not_judged"], b["not_judged_why"]) == (1, 0, 1, {"no history": 1})
    line = basis_line(b)
    assert line.startswith("0 of 1 cell(s) judged") and "1 no history" in line
    # results check (old: "0 finding(s), 0 noisy cell(s), 1 cell(s) checked")
    assert cli_main(["results", "check", rid, "--store", store.url()]) == 0
    out = capsys.readouterr().out
    assert line in out and "cell(s) checked" not in out
    assert cli_main(["results", "check", rid, "--store", store.url(), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["basis"]["not_judged"] == 1
    # results show reads the recorded report: the same sentence
    assert cli_main(["results", "show", rid, "--store", store.url()]) == 0
    assert f"regressions: {line}" in capsys.readouterr().out
    # the results page (old: a green "no regression" badge and "1 cell(s) checked against their history")
    app = create_app(lambda: store, authorize=lambda: Viewer(name="t", suites=frozenset({"mxnet-bert"}),
                                                             other_suites=False, known=frozenset({"mxnet-bert"})))
    html = TestClient(app).get(f"/runs/{rid}").text
    assert "no regression" not in html and 'data-verdict="not judged"' in html and line in html
    index = TestClient(app).get("/").text
    assert "not judged" in index
    # notification, run note and make run's summary take the same line
    doc = check.read_recorded(store, rid)
    msg = findings_message(doc)
    assert "no regression" not in msg["subject"] and "not judged" in msg["subject"] and line in msg["text"]
    note = run_note([{"run_id": rid, "suite": "mxnet-bert", "cells": [],
                      "regressions": {"findings": 0, "basis_line": line}}], "http://x")
    assert line in note


def test_counts_agree_between_the_report_and_its_recorded_form():
    results = synth.nightly_results(8, trials=3, plant={7: {"mxnet-bert/bz32/fp32/4n8g": 0.85}})
    from dlperf_tasks.history.regress import detect
    from dlperf_tasks.history.runs import RunView

    views = [RunView.from_result(r) for r in results]
    rep = detect(views[7], views[:7])
    b = rep.basis
    assert b["regression"] >= 1 and b["judged"] + b["not_judged"] == b["cells"] == 8
    assert basis_of(rep.to_dict()) == b
    legacy = {k: v for k, v in rep.to_dict().items() if k != "basis"}  # recorded before verdicts stated their basis
    old = basis_of(legacy)
    assert (old["regression"], old["cells"]) == (b["regression"], b["cells"])
    head = rep.summary_lines()[0]
    assert re.search(rf"{b['judged']} of {b['cells']} cell\(s\) judged: {b['regression']} regression", head)


def test_states_order_and_reasons():
    vs = [{"kind": "throughput", "cell_id": "a", "status": "ok"},
          {"kind": "scaling", "cell_id": "a", "status": "regression"},
          {"kind": "throughput", "cell_id": "b", "status": "undecided"},
          {"kind": "throughput", "cell_id": "c", "status": "insufficient_history"},
          {"kind": "loss", "cell_id": "c", "status": "insufficient_history"},
          {"kind": "throughput", "cell_id": "d", "status": "noisy"},
          {"kind": "throughput", "cell_id": "e", "status": "improved"},
          {"kind": "loss", "cell_id": "f", "status": "fast but wrong?"}]
    s = summarize(vs)
    assert s["states"] == {"a": "regression", "b": "not judged: too few trials", "c": "not judged: no history",
                           "d": "noisy", "e": "improvement", "f": "regression"}
    assert (s["judged"], s["not_judged"], s["regression"]) == (4, 2, 2)


def test_make_run_table_and_report_md_flag_noisy_superlinear_and_unsteady():
    """The issue's make run: 1n1g trials 127.9 / 15.68 / 59.9 (CV 0.83) and a speedup of 2.07 on
    2 GPUs, shown without a flag; old code: no flags column, no Flags section."""
    from dlperf_tasks.engine.outputs import result_table
    from dlperf_tasks.report.markdown import render_markdown

    cells = [
        {"cell_id": "s/bz8/fp32/1n1g", "nodes": 1, "gpus": 1, "median_speed": 59.9, "average_speed": 67.83,
         "speedup": 1.0, "n_valid": 3, "n_invalid": 0, "unit": "samples/s", "cv": 0.8334,
         "trials": [], "steady_state": {"steady": False, "unsteady_trials": ["t2"]}},
        {"cell_id": "s/bz8/fp32/1n2g", "nodes": 1, "gpus": 2, "median_speed": 124.0, "average_speed": 124.0,
         "speedup": 2.07, "scaling_efficiency": 1.035, "n_valid": 3, "n_invalid": 0, "unit": "samples/s",
         "cv": 0.01, "trials": []},
    ]
    table = result_table([{"cells": cells}])
    assert "flags" in table.splitlines()[0]
    assert "noisy: CV 83.34% > 5%" in table and "unsteady window: t2" in table
    assert "superlinear: speedup 2.07 on 2 GPUs" in table
    md = render_markdown({"run": {"suite": "s"}, "cells": cells}, trials=False, full=False)
    assert "## Flags" in md and "noisy: CV 83.34% > 5%" in md and "superlinear" in md


def test_not_judged_says_how_many_earlier_runs_there_were(tmp_path, capsys):
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, synth.nightly_results(3), str(tmp_path / "w"))
    rep = check.check_run(store, ids[-1], RegressConfig(min_history=3), log=None, notify_target="", record=False)
    line = basis_line(rep.basis)
    assert "no history: 2 earlier runs, need 3)" in line, line  # never "0", never without the count
    assert cli_main(["results", "check", ids[-1], "--store", store.url()]) == 0  # the default: 5
    assert "2 earlier runs, need 5" in capsys.readouterr().out
