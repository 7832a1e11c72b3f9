"""``dlperf results export --format openmetrics|conbench|bencher``: per cell
throughput, speedup, efficiency and CV, labelled by suite, cell, run and image digest; each
format checked by its own parser (prometheus_client's OpenMetrics parser) or by a JSON schema
written from the format's published reference (tests/data/export_schemas/)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import jsonschema
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.export_formats import render, to_bencher, to_conbench, to_openmetrics
from dlperf_tasks.store import Store
from tests.fixtures import synth

SCHEMAS = Path(__file__).parent.parent / "data" / "export_schemas"
CELL = "mxnet-bert/bz32/fp32/4n8g"


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


@pytest.fixture(scope="module")
def results():
    rs = synth.nightly_results(3)
    last = copy.deepcopy(rs[-1])
    lat = copy.deepcopy(last["cells"][0])  # a latency suite's cell (Megatron: ms/iter, throughput apart)
    lat.update(cell_id="megatron-gpt/bz8/fp16/DP_x/1n1g", metric_kind="latency", unit="ms/iter",
               median_speed=464.5, min=460.0, max=470.0, throughput=17.2, values=[464.5, 460.0, 470.0])
    dead = copy.deepcopy(last["cells"][1])  # no valid trial: nothing made up
    dead.update(cell_id="mxnet-bert/bz8/fp32/1n1g", median_speed="NaN", values=[], n_valid=0, n_invalid=3,
                speedup=None, scaling_efficiency=None, cv=None, min=None, max=None)
    last["cells"] += [lat, dead]
    return rs[:-1] + [last]


def _cells(result):
    return {c["cell_id"]: c for c in result["cells"]}


def test_openmetrics_parses_with_prometheus_client_and_carries_every_figure_and_label(results):
    text = to_openmetrics(results)
    fams = {f.name: f for f in text_string_to_metric_families(text)}  # strict: # EOF, grouping, escapes
    assert {"dlperf_throughput_samples_per_second", "dlperf_speedup_ratio", "dlperf_scaling_efficiency_ratio",
            "dlperf_trial_cv_ratio", "dlperf_latency_seconds", "dlperf_valid_trials", "dlperf_run"} <= set(fams)
    last = results[-1]
    run = last["run"]
    start = {r["run"]["run_id"]: r["run"]["started_at"] for r in results}
    ts_of = {dt.datetime.fromisoformat(v).timestamp(): k for k, v in start.items()}
    by = {(ts_of[float(s.timestamp)], s.labels["cell"]): s
          for s in fams["dlperf_throughput_samples_per_second"].samples}
    s = by[(run["run_id"], CELL)]
    # the labels identify the cell and the machine, never the run: one series per cell across runs
    assert s.labels == {"suite": "mxnet-bert", "cell": CELL, "precision": "fp32", "topology": "4n8g",
                        "cluster": "node1,node2,node3,node4", "image_digest": run["image_digest"]}
    series = {tuple(sorted(x.labels.items())) for x in fams["dlperf_throughput_samples_per_second"].samples}
    assert len(series) == len(last["cells"]) - 1  # 3 runs, one series per live cell
    assert s.value == _cells(last)[CELL]["median_speed"]
    assert len(by) == sum(len(r["cells"]) for r in results) - 1  # every cell of every run but the dead one
    cv = {(ts_of[float(x.timestamp)], x.labels["cell"]): x.value for x in fams["dlperf_trial_cv_ratio"].samples}
    assert cv[(run["run_id"], CELL)] == _cells(last)[CELL]["cv"]
    eff = {x.labels["cell"]: x.value for x in fams["dlperf_scaling_efficiency_ratio"].samples
           if ts_of[float(x.timestamp)] == run["run_id"]}
    assert eff[CELL] == _cells(last)[CELL]["scaling_efficiency"]
    lat = {x.labels["cell"]: x.value for x in fams["dlperf_latency_seconds"].samples}
    assert lat == {"megatron-gpt/bz8/fp16/DP_x/1n1g": pytest.approx(0.4645)}
    # the latency cell's throughput is its global samples/s, not its ms/iter
    assert by[(run["run_id"], "megatron-gpt/bz8/fp16/DP_x/1n1g")].value == 17.2
    assert (run["run_id"], "mxnet-bert/bz8/fp32/1n1g") not in by  # no valid trial: no sample, never 0
    # the info metric joins a timestamp to its run
    info = {ts_of[float(x.timestamp)]: x.labels for x in fams["dlperf_run"].samples}
    assert set(info) == set(start) and all(v["run_id"] == k for k, v in info.items())
    plain = {f.name: f for f in text_string_to_metric_families(to_openmetrics(results, timestamps=False))}
    assert all(s.timestamp is None for f in plain.values() for s in f.samples)
    assert {x.labels["cell"]: x.value for x in plain["dlperf_throughput_samples_per_second"].samples}[CELL] == \
        _cells(last)[CELL]["median_speed"]  # no timestamps: each series' latest run only


def test_openmetrics_leaves_out_an_unknown_image_digest(results):
    doc = copy.deepcopy(results[-1])
    doc["run"]["image_digest"] = ""
    fams = {f.name: f for f in text_string_to_metric_families(to_openmetrics([doc]))}
    assert all("image_digest" not in s.labels for f in fams.values() for s in f.samples)


def test_openmetrics_label_values_are_escaped_and_control_characters_dropped(results):
    doc = copy.deepcopy(results[-1])
    doc["cells"][0]["cell_id"] = 'evil"cell\\x\nnext\x1b[2J'
    text = to_openmetrics([doc])
    assert "\x1b" not in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    cells = {s.labels["cell"] for s in fams["dlperf_throughput_samples_per_second"].samples}
    assert 'evil"cell\\\\x\nnext\\x1b[2J' in cells


def test_openmetrics_never_raises_on_a_surrogate_nor_collapses_two_cells(results):
    doc = copy.deepcopy(results[-1])
    # cells that differ only in a control character, a lone surrogate, or a backslash spelling of one
    for cell, cid in zip(doc["cells"], ["a\x01", "a\x02", "a\ud800", "a\udc00", "a\\x01", "a?"]):
        cell["cell_id"] = cid
    doc["run"]["suite"] = "s\udfff"
    text = to_openmetrics([doc])
    text.encode("utf-8")  # no lone surrogate left
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    cells = [s.labels["cell"] for s in fams["dlperf_throughput_samples_per_second"].samples]
    assert len(cells) == len(set(cells)) == len(doc["cells"]) - 1
    doc["cells"][1] = copy.deepcopy(doc["cells"][0])  # one run, one cell twice: refused in one line
    with pytest.raises(DlperfError, match="twice"):
        to_openmetrics([doc])


def test_json_exports_are_strict_even_when_a_figure_overflows(results, tmp_path):
    doc = copy.deepcopy(results[-1])
    lat = next(c for c in doc["cells"] if c.get("metric_kind") == "latency")
    lat.update(median_speed=1e306, min=1e306, max=1e307, cell_id="lat\ud800")
    doc["cells"][0]["cv"] = 1e307  # x100 for a percentage: beyond a double
    notes: list[str] = []
    for fmt in ("bencher", "conbench"):
        text = render([doc], fmt, notes=notes)
        doc_back = json.loads(text, parse_constant=lambda c: pytest.fail(f"{fmt}: non-strict constant {c}"))
        json.dumps(doc_back, ensure_ascii=False).encode("utf-8")  # no lone surrogate, escaped or not
        assert "lat\\\\ud800" in text  # written out as text instead
    assert any("latency" in n for n in notes) and any("cv-percent" in n for n in notes)
    bmf = json.loads(to_bencher(doc))
    assert "cv-percent" not in bmf[doc["cells"][0]["cell_id"]]


def test_conbench_payloads_match_the_published_schema(results):
    docs = json.loads(to_conbench(results))
    jsonschema.validate(docs, _schema("conbench_benchmark_result.schema.json"))
    assert len(docs) == sum(len(r["cells"]) for r in results)
    last = results[-1]
    one = next(d for d in docs if d["run_id"] == last["run"]["run_id"] and d["tags"]["cell"] == CELL)
    cell = _cells(last)[CELL]
    assert one["tags"]["name"] == "mxnet-bert" and one["context"]["image_digest"] == last["run"]["image_digest"]
    assert one["stats"]["data"] == cell["values"] and one["stats"]["unit"] == "i/s"
    assert one["optional_benchmark_info"]["speedup"] == cell["speedup"]
    assert one["optional_benchmark_info"]["efficiency"] == cell["scaling_efficiency"]
    assert one["optional_benchmark_info"]["cv_pct"] == round(cell["cv"] * 100, 2)
    lat = next(d for d in docs if d["tags"]["cell"].startswith("megatron"))
    assert lat["stats"]["unit"] == "s" and lat["stats"]["data"][0] == pytest.approx(0.4645)
    dead = next(d for d in docs if d["tags"]["cell"] == "mxnet-bert/bz8/fp32/1n1g")
    assert "stats" not in dead and "no valid trial" in dead["error"]["reason"]
    # the schema can fail: a payload without a case name or with both stats and error is refused
    for broken in ({**one, "tags": {"cell": CELL}}, {**one, "error": {"reason": "x"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate([broken], _schema("conbench_benchmark_result.schema.json"))


def test_bencher_bmf_matches_the_published_schema(results):
    last = results[-1]
    bmf = json.loads(to_bencher(last))
    jsonschema.validate(bmf, _schema("bencher_bmf.schema.json"))
    cell = _cells(last)[CELL]
    assert bmf[CELL]["throughput"] == {"value": cell["median_speed"], "lower_value": cell["min"],
                                       "upper_value": cell["max"]}
    assert bmf[CELL]["speedup"]["value"] == cell["speedup"]
    assert bmf[CELL]["scaling-efficiency"]["value"] == cell["scaling_efficiency"]
    assert bmf[CELL]["cv-percent"]["value"] == pytest.approx(cell["cv"] * 100)
    assert bmf["megatron-gpt/bz8/fp16/DP_x/1n1g"]["latency"]["value"] == pytest.approx(464.5e6)  # ns
    assert "mxnet-bert/bz8/fp32/1n1g" not in bmf
    with pytest.raises(Exception, match="one run"):
        render(results, "bencher")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({CELL: {"throughput": {"lower_value": 1.0}}}, _schema("bencher_bmf.schema.json"))


def test_cli_exports_named_runs_and_a_suites_history(tmp_path, capsys):
    store_dir = tmp_path / "store"
    ids = synth.seed_store(Store.from_url(f"file://{store_dir}"), synth.nightly_results(3), str(tmp_path / "w"))
    assert main(["results", "export", "latest", "--format", "openmetrics", "--store", str(store_dir)]) == 0
    fams = {f.name: f for f in text_string_to_metric_families(capsys.readouterr().out)}
    assert {s.labels["run_id"] for s in fams["dlperf_run"].samples} == {ids[-1]}
    out = tmp_path / "bmf.json"
    assert main(["results", "export", ids[0][:16], "--format", "bencher", "--out", str(out),
                 "--store", str(store_dir)]) == 0
    jsonschema.validate(json.loads(out.read_text()), _schema("bencher_bmf.schema.json"))
    assert f"1 run(s) written to {out} (bencher)" in capsys.readouterr().out
    assert main(["results", "export", "--suite", "mxnet-bert", "--format", "conbench",
                 "--store", str(store_dir)]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["run_id"] for d in docs][:: len(docs) // 3] == ids  # oldest first, every run
    assert main(["results", "export", "--format", "openmetrics", "--store", str(store_dir)]) != 0
    assert "name the RUN" in capsys.readouterr().err


def test_cli_out_files_carry_no_control_character(tmp_path, capsys):
    store_dir = tmp_path / "store"
    docs = synth.nightly_results(1)
    docs[0]["cells"][0]["cell_id"] = "evil\x1b]0;pwned\x07\x9b2J"  # publish refuses lone surrogates
    synth.seed_store(Store.from_url(f"file://{store_dir}"), docs, str(tmp_path / "w"))
    for fmt in ("openmetrics", "conbench", "bencher"):
        out = tmp_path / f"x.{fmt}"
        assert main(["results", "export", "latest", "--format", fmt, "--out", str(out),
                     "--store", str(store_dir)]) == 0
        data = out.read_bytes().decode("utf-8")  # valid UTF-8: no lone surrogate
        assert not [c for c in data if c != "\n" and (ord(c) < 32 or 127 <= ord(c) < 160)], fmt
        assert "evil" in data
