"""One truth on every surface: one run with a noisy cell, a superlinear cell, an efficiency above 1,
an unsteady window and a cell without a valid trial, rendered through every surface that shows cells (``make run``'s
table, report.md, ``dlperf results show``, the results page, the DAG run's note, a regression
notification, the Conbench export); each shows report/flags.py's wording of each flag, character for character."""

from __future__ import annotations

import copy
import json

from fastapi.testclient import TestClient

from dlperf_tasks.cli import main
from dlperf_tasks.engine.outputs import cell_rows, result_table
from dlperf_tasks.history.export_formats import to_conbench
from dlperf_tasks.history.check import check_run
from dlperf_tasks.history.links import run_note
from dlperf_tasks.history.notify import findings_message
from dlperf_tasks.report.flags import flags_text, row_flags
from dlperf_tasks.report.markdown import render_markdown
from dlperf_tasks.store import Store
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.app import create_app
from tests.fixtures import synth


def _flagged_run() -> dict:
    doc = copy.deepcopy(synth.nightly_results(1)[0])
    cells = {c["topology"]: c for c in doc["cells"] if c["batch_size_per_device"] == 32}
    cells["1n1g"]["cv"] = 0.0834  # noisy
    cells["1n8g"].update(speedup=9.123, scaling_efficiency=1.14)  # superlinear
    cells["2n8g"].update(scaling_efficiency=1.016)  # efficiency above 1, speedup under the GPU count
    cells["4n8g"]["steady_state"] = {"steady": False, "unsteady_trials": [2, 5]}  # speed still trending
    dead = next(c for c in doc["cells"] if c["batch_size_per_device"] == 24 and c["topology"] == "1n1g")
    dead.update(n_valid=0, n_invalid=len(dead["values"]), median_speed=None, average_speed=None, speedup=None, cv=None)
    return doc


def test_the_same_flags_in_the_same_words_on_every_surface(tmp_path, capsys):
    doc = _flagged_run()
    wanted = {c["cell_id"]: flags_text(c) for c in doc["cells"] if row_flags(c)}
    assert sorted(wanted.values()) == sorted(["noisy: CV 8.34% > 5%", "superlinear: speedup 9.12 on 8 GPUs",
                                              "efficiency 1.02 > 1", "no valid trial",
                                              "unsteady window: 2, 5"])
    store_dir = tmp_path / "store"
    synth.seed_store(Store.from_url(f"file://{store_dir}"), [doc], str(tmp_path / "w"), report=True)
    rid = doc["run"]["run_id"]
    assert main(["results", "show", rid[:12], "--store", str(store_dir)]) == 0
    app = create_app(lambda: Store.from_url(f"file://{store_dir}"),
                     authorize=lambda: Viewer("alice", frozenset({"mxnet-bert"}), False, frozenset({"mxnet-bert"})))
    report = check_run(Store.from_url(f"file://{store_dir}"), rid, record=False, notify_target="", log=None).to_dict()
    report["findings"] = [{"kind": "speed", "cell_id": "1n1g/bz32/fp32", "baseline": 100.0, "current": 90.0,
                           "unit": "samples/s", "delta_pct": -10.0}]  # a finding, so that a message is sent
    page = TestClient(app).get("/runs/latest").text.replace("&gt;", ">")
    surfaces = {
        "make run table": result_table([{"cells": cell_rows(doc)}]),
        "report.md": render_markdown(doc),
        "results show": capsys.readouterr().out,
        "results page": page,
        "run note": run_note([{"run_id": rid, "suite": doc["run"]["suite"], "cells": doc["cells"]}], "http://x"),
        "notification": findings_message(report, "http://x")["text"],
        "conbench": "\n".join("; ".join(d["optional_benchmark_info"].get("flags", []))
                              for d in json.loads(to_conbench([doc]))),
    }
    for name, text in surfaces.items():
        for cell, flags in wanted.items():
            assert flags in text, (name, cell, flags)
