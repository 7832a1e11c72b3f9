"""Cell specs, compare, trend, DataFrame/Parquet export, output formats and notifications
(pure history code; the webhook test uses a real HTTP server on 127.0.0.1)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pandas as pd
import pytest

from tests.fixtures import synth
from dlperf_tasks.history.cellspec import CellSpecError, match_cell, parse_cell_id
from dlperf_tasks.history.compare import compare_runs
from dlperf_tasks.history.fmt import render
from dlperf_tasks.history.frame import runs_frame, write_parquet
from dlperf_tasks.history.notify import NotifyError, notify, redact_target
from dlperf_tasks.history.runs import RunView
from dlperf_tasks.history.trend import cell_trend

IDS = synth.cell_ids()
S_CELL = "mxnet-bert/bz32/fp32/4n8g"


@pytest.fixture(scope="module")
def results():
    return synth.nightly_results(12, plant={11: {S_CELL: 0.92}}, env_changes={11: {"nccl": "2.19.3"}})


def test_parse_cell_id():
    k = parse_cell_id("mxnet-bert/bz32/fp32/4n8g")
    assert (k.suite, k.batch_size, k.precision, k.topology, k.gpus) == ("mxnet-bert", 32, "fp32", "4n8g", 32)
    assert k.baseline_id == "mxnet-bert/bz32/fp32/1n1g" and not k.is_baseline
    m = parse_cell_id("megatron-gpt/bz8/fp16/DP_1x1x1_2_1536x16/1n1g")
    assert m.layout_case == "DP_1x1x1_2_1536x16" and m.baseline_id is None
    assert parse_cell_id("tf-bert/bz64/fp16_xla/16n8g").nodes == 16
    for bad in ("nope", "suite/bz32/fp32/8g", "suite/fp32/1n1g"):
        with pytest.raises(CellSpecError, match="invalid cell id"):
            parse_cell_id(bad)


def test_match_cell_any_order_and_errors():
    assert match_cell("4n8g/bz32/fp32", IDS) == S_CELL
    assert match_cell("fp32/4n8g/bz32", IDS) == S_CELL
    assert match_cell(S_CELL, IDS) == S_CELL
    with pytest.raises(CellSpecError, match="ambiguous.*bz24.*bz32|ambiguous.*bz32.*bz24"):
        match_cell("4n8g", IDS)
    with pytest.raises(CellSpecError, match="matches no cell; known cells"):
        match_cell("8n8g/bz32/fp32", IDS)


def test_compare_flags_planted_cell_only(results):
    a = RunView.from_result(results[10])
    b = RunView.from_result(results[11])
    doc = compare_runs(a, b, [RunView.from_result(r) for r in results[:10]])
    by = {c["cell_id"]: c for c in doc["cells"]}
    assert by[S_CELL]["verdict"] == "slower" and by[S_CELL]["beyond_noise"] is True
    assert -11 < by[S_CELL]["delta_pct"] < -5
    assert by[S_CELL]["ci_pct"][1] < 0 and by[S_CELL]["noise_source"] == "history (10 runs)"
    assert by[S_CELL]["median_a"] == a.cells[S_CELL].median
    others = [c for cid, c in by.items() if cid != S_CELL]
    assert all(c["verdict"] in ("same", "undecided") and c["beyond_noise"] is False for c in others)
    assert doc["env_diff"] == {"nccl": {"baseline": "2.18.5", "current": "2.19.3"}}


def test_compare_cell_only_on_one_side(results):
    a = RunView.from_result(results[0])
    doc_b = json.loads(json.dumps(results[1]))
    doc_b["cells"] = [c for c in doc_b["cells"] if c["cell_id"] != S_CELL]
    cells = {c["cell_id"]: c for c in compare_runs(a, RunView.from_result(doc_b))["cells"]}
    assert cells[S_CELL]["verdict"] == "only_in_a" and cells[S_CELL]["beyond_noise"] is None


def test_trend_points_and_last(results):
    views = [RunView.from_summary(synth.summary_of(r)) for r in results]
    tr = cell_trend(list(reversed(views)), "4n8g/bz32/fp32", last=5)
    assert tr.cell_id == S_CELL and len(tr.points) == 5
    assert [p.run_id for p in tr.points] == [r["run"]["run_id"] for r in results[-5:]]
    assert tr.points[-1].median < 0.95 * tr.overall_median()
    assert tr.points[-1].min <= tr.points[-1].median <= tr.points[-1].max
    assert len(tr.points[0].trial_values) == 7


def test_frame_and_parquet_roundtrip(results, tmp_path):
    views = [RunView.from_summary(synth.summary_of(r)) for r in results]
    df = runs_frame(views)
    assert len(df) == 12 * 8
    assert {"run_id", "cell_id", "median", "speedup", "trial_values", "env.nccl", "env.image_digest"} <= set(df.columns)
    assert df[df.run_id == views[-1].run_id]["env.nccl"].unique().tolist() == ["2.19.3"]
    out = tmp_path / "h.parquet"
    assert write_parquet(views, out) == 96
    back = pd.read_parquet(out)
    assert len(back) == 96 and list(back.columns) == list(df.columns)
    row = back[(back.cell_id == S_CELL)].sort_values("date").iloc[-1]
    assert row["median"] == views[-1].cells[S_CELL].median
    assert len(row["trial_values"]) == 7


def test_render_formats():
    rows = [{"a": 1.23456, "b": None, "c": [1, 2]}, {"a": 1234.5, "b": True, "c": []}]
    t = render(rows, "table")
    assert t.splitlines()[0].split() == ["a", "b", "c"] and "1.235" in t and "1234.50" in t
    assert render(rows, "csv").splitlines() == ["a,b,c", '1.23456,,"[1, 2]"', "1234.5,True,[]"]
    assert json.loads(render(rows, "json")) == rows
    with pytest.raises(ValueError, match="unknown format"):
        render(rows, "xml")


class _Hook(BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.got.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(204 if self.path.startswith("/good") else 500)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_notify_webhook_and_callable(monkeypatch):
    srv = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/good?token=SECRET"
        report = {"run_id": "r1", "findings": [{"kind": "scaling"}]}
        assert notify({"findings": []}, url) is False  # nothing to say
        assert notify(report, url) is True
        assert _Hook.got[-1][1] == "application/json" and _Hook.got[-1][2] == report
        monkeypatch.setenv("DLPERF_NOTIFY_URL", url)
        assert notify(report) is True and len(_Hook.got) == 2
        bad = f"http://127.0.0.1:{srv.server_port}/fail?token=SECRET"
        with pytest.raises(NotifyError, match="HTTP 500") as ei:
            notify(report, bad)
        assert "SECRET" not in str(ei.value)
    finally:
        srv.shutdown()
    assert redact_target("https://h.example:8443/x?token=abc") == "https://h.example:8443/..."
    got = []
    import tests.unit.test_history_tools as me
    me.RECEIVED = got
    assert notify(report, "python:tests.unit.test_history_tools:_receiver") is True
    assert got == [report]
    with pytest.raises(NotifyError, match="expected http"):
        notify(report, "not-a-target")
    with pytest.raises(NotifyError, match="cannot import"):
        notify(report, "python:no_such_module_x:f")


RECEIVED: list = []


def _receiver(report):
    RECEIVED.append(report)
