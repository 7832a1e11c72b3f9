"""Reports: the seeds' Markdown tables, the result JSON round trip and its validation."""

import json
import math

import pytest

from dlperf_tasks.core.model import MetricKind, ParallelLayout, Sample, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.report.markdown import (dlperf_text_lines, latency_table, render_dlperf_text, render_markdown,
                                          throughput_table)
from dlperf_tasks.report.result_json import (ResultFormatError, build_result, dumps, load_result, write_result)
from dlperf_tasks.measure.stats import aggregate
from tests.unit.dlperf_seed_data import SEEDS
from tests.unit.test_stats import make_cell, ok, seed_results


def seed_result(name):
    seed = SEEDS[name]
    return build_result(aggregate(seed_results(seed)), {"run_id": "r1", "suite": seed["suite"]},
                        dlperf_model=seed["dlperf_model"])


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_tables_reproduced_exactly(name):
    seed = SEEDS[name]
    result = seed_result(name)
    assert throughput_table(result["cells"], seed["style"]) == seed["TABLE"]
    # and the report contains the table verbatim (default style = seeds 000/004)
    if seed["style"] == "dlperf":
        assert seed["TABLE"] in render_markdown(result)


def test_dlperf_text_matches_seed_output():
    result = seed_result("000-mxnet-bert-bz32")
    text = render_dlperf_text(result)
    assert SEEDS["000-mxnet-bert-bz32"]["DICT_TEXT"] in text
    # cumulative per-cell lines like DLPerf's, in trial order
    assert "{1: 126.29, 2: 126.4, 3: 125.48, 4: 127.17, 5: 127.09, 6: 127.73, 7: 127.05}" in text
    # dlperf extract writes it line by line (the text is quadratic in a cell's trials): the same text
    lines = list(dlperf_text_lines(result))
    assert "".join(f"{line}\n" for line in lines) == text and lines[0] == text.splitlines()[0]


def test_dlperf_text_of_an_empty_result_is_one_newline():
    assert render_dlperf_text({"cells": []}) == "\n" and list(dlperf_text_lines({"cells": []})) == [""]


def test_missing_baseline_rendered_as_na():
    c8 = make_cell(topo="1n8g")
    result = build_result(aggregate([ok(c8, 1, 900.0)]), {"run_id": "r", "suite": "mxnet-bert"})
    table = throughput_table(result["cells"])
    assert table.splitlines()[-1] == "| 1        | 8       | 900.00    | n/a     |"
    md = render_markdown(result)
    assert "n/a (no valid 1n1g baseline)" in md and "no speedup because" in md
    assert result["cells"][0]["speedup"] is None and result["cells"][0]["speedup_state"] == "missing_baseline"


def test_invalid_trials_section_and_raw_numbers_kept(tmp_path):
    c1 = make_cell()
    bad = TrialResult(trial=Trial(c1, 3), status=TrialStatus.INVALID_LOG,
                      reason="log ends at iteration 57, expected 200", metric=TrialMetric(88.123),
                      samples=[Sample(1, 90.0, "samples/s", rank=0), Sample(2, math.nan, "samples/s", rank=0)],
                      log_paths=["1n1g/bert_b32_fp32_3.log"])
    result = build_result(aggregate([ok(c1, 1, 100.0), ok(c1, 2, 104.0), bad]), {"run_id": "r", "suite": "mxnet-bert"})
    cell = result["cells"][0]
    assert (cell["n_valid"], cell["n_invalid"], cell["median_speed"]) == (2, 1, 102.0)
    t3 = cell["trials"][2]
    assert t3["status"] == "INVALID_LOG" and t3["value"] == 88.12 and t3["valid"] is False
    assert t3["samples"] == [[1, 90.0, 0], [2, "NaN", 0]]
    md = render_markdown(result)
    assert "1 of 3 trials are invalid" in md
    assert "| mxnet-bert/bz32/fp32/1n1g | 3     | INVALID_LOG | 88.12     | log ends at iteration 57, expected 200 |" in md
    assert "88.12 (INVALID_LOG)" in md  # per-trial table
    path = write_result(result, tmp_path / "out" / "result.json")
    back = load_result(path)
    assert back == json.loads(dumps(result))
    assert back["cells"][0]["trials"][2]["samples"][1][1] == "NaN"


def test_result_json_shape_and_round_trip(tmp_path):
    result = seed_result("000-mxnet-bert-bz32")
    assert result["schema_version"] == 1
    assert result["dlperf"]["bz32"]["bert-base"]["4n8g"] == {
        "average_speed": 1906.32, "batch_size_per_device": 32, "median_speed": 1895.5, "speedup": 14.92}
    c = result["cells"][1]
    assert c["cell_id"] == "mxnet-bert/bz32/fp32/1n8g"
    assert (c["nodes"], c["gpus"], c["unit"], c["metric_kind"]) == (1, 8, "samples/s", "throughput")
    assert c["values"] == [932.47, 922.0, 928.03, 929.69, 944.12, 926.44, 926.88]
    assert c["trials"][0]["trial_id"] == "mxnet-bert/bz32/fp32/1n8g/t1"
    p = write_result(result, tmp_path / "result.json")
    assert load_result(p)["dlperf"] == result["dlperf"]


def test_load_result_rejects_bad_files(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"schema_version": 99, "run": {}, "cells": [], "dlperf": {}}))
    with pytest.raises(ResultFormatError, match="unsupported schema_version 99"):
        load_result(p)
    p.write_text("{not json")
    with pytest.raises(ResultFormatError, match="not valid JSON"):
        load_result(p)
    p.write_text(json.dumps({"schema_version": 1, "run": {"run_id": "x", "suite": "s"}, "cells": [{"cell_id": 3}],
                             "dlperf": {}}))
    with pytest.raises(ResultFormatError, match="cells/0"):
        load_result(p)
    with pytest.raises(ResultFormatError, match="does not exist"):
        load_result(tmp_path / "nope.json")


def test_latency_table_like_seed_002():
    cells = []
    for topo, case, group, lat, mem in [("1n1g", "DP_1x1x1_2_1536x16", "DP", 464.12, 14362.0),
                                        ("2n8g", "DP_16x1x1_32_1536x16", "DP", 664.46, 14508.0),
                                        ("1n1g", "MP_1x1x1_8_768x12", "MP", 611.2, 9810.0)]:
        layout = ParallelLayout(group, case, 1, 1, 1, 2, 2, 1536, 16, 16)
        cell = make_cell("megatron-gpt", topo, 2, "amp", "gpt", "megatron_gpt", layout=layout)
        cells.append(ok(cell, 1, lat, MetricKind.LATENCY, memory_mib=mem))
    result = build_result(aggregate(cells), {"run_id": "m", "suite": "megatron-gpt"})
    assert latency_table([c for c in result["cells"]]) == (
        "group | case | latency | memory\n"
        "-- | -- | -- | --\n"
        "DP |  |  | \n"
        " -- | DP_1x1x1_2_1536x16 | 464.12 (ms) | 14362 (MiB)\n"
        " -- | DP_16x1x1_32_1536x16 | 664.46 (ms) | 14508 (MiB)\n"
        "MP |  |  | \n"
        " -- | MP_1x1x1_8_768x12 | 611.2 (ms) | 9810 (MiB)")
    assert result["dlperf"]["latency"]["DP_1x1x1_2_1536x16"]["latency_ms"] == 464.12
    assert "latency and memory per case" in render_markdown(result)


def test_trials_round_trip_through_result_json(tmp_path):
    from dlperf_tasks.report.result_json import trials_from_result

    c1, c8 = make_cell(), make_cell(topo="1n8g")
    bad = TrialResult(trial=Trial(c8, 2), status=TrialStatus.HANG, reason="no progress",
                      samples=[Sample(1, math.inf, "samples/s", rank=3)], exit_codes={"node1": None})
    res = [ok(c1, 1, 100.0), ok(c8, 1, 700.0), bad]
    first = build_result(aggregate(res), {"run_id": "r", "suite": "mxnet-bert"})
    back = trials_from_result(load_result(write_result(first, tmp_path / "r.json")))
    assert [(t.trial.id, t.status, t.reason) for t in back] == [(t.trial.id, t.status, t.reason) for t in res]
    assert back[2].samples[0].value == math.inf and back[2].samples[0].rank == 3
    again = build_result(aggregate(back), {"run_id": "r", "suite": "mxnet-bert"})
    assert json.loads(dumps(again)) == json.loads(dumps(first))
