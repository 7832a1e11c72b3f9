"""Seed 001's per-run index files (Paddle benchmark convention), written from a real result JSON."""

from __future__ import annotations

import json

from dlperf_tasks.catalog import load_suite
from dlperf_tasks.core.model import TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.report.index_files import write_index_files
from dlperf_tasks.report.result_json import build_result
from dlperf_tasks.measure.stats import aggregate

SPEEDS = {"bz32/fp32/ga2112/1n1g": [127.09, 127.1, 127.0], "bz32/fp32/ga264/1n8g": [1018.4, 1018.0, 1019.0],
          "bz32/fp32/ga66/4n8g": [3900.0, 3901.0, 3899.0], "bz32/fp32/ga1/4n8g": [3000.0, 3001.0, 2999.0]}


def _result():
    p = plan(load_suite("pytorch-bert"), {"batch_sizes": "32", "precisions": "fp32", "trials": 3})
    results = []
    for pt in p.trials:
        key = pt.trial.cell.id.split("/", 1)[1]
        v = SPEEDS[key][pt.trial.index - 1]
        status = TrialStatus.OK if key != "bz32/fp32/ga1/4n8g" or pt.trial.index != 3 else TrialStatus.HANG
        results.append(TrialResult(trial=pt.trial, status=status, metric=TrialMetric(value=v),
                                   log_paths=list(pt.log_paths), nodes=["node1"]))
    run = {"run_id": "r1", "suite": "pytorch-bert", "framework": "pytorch_bert", "image": "nvcr.io/nvidia/pytorch:20.06-py3",
           "upstream_commit": "5cc03caa153faab7a2c3b1b5b5d63663f06ce1b4",
           "env": {"nodes": {"node1": {"framework_version": "1.6.0a0+9907a3e"}}}}
    return build_result(aggregate(results), run)


def test_index_files_names_and_fields_follow_seed_001(tmp_path):
    paths = write_index_files(_result(), tmp_path / "logs" / "index")
    names = sorted(p.name for p in paths)
    assert names == ["bert_base_mp_bs32_fp32_32_speed", "bert_base_mp_bs32_fp32_8_speed",
                     "bert_base_sp_bs32_fp32_1_speed", "bert_base_without_gradacc_mp_bs32_fp32_32_speed"]
    one = json.loads((tmp_path / "logs/index/bert_base_sp_bs32_fp32_1_speed").read_text())
    assert one["run_mode"] == "sp" and one["gpu_num"] == 1 and one["batch_size"] == 32 and one["fp_item"] == "fp32"
    assert one["FINAL_RESULT"] == 127.09 and one["UNIT"] == "sequences/s" and one["JOB_FAIL_FLAG"] == 0
    assert one["frame_version"] == "1.6.0a0+9907a3e" and one["frame_commit"].startswith("5cc03caa")
    assert one["gradient_accumulation_steps"] == 2112 and one["direction_id"] == 1  # 67584 / (32 x 1)
    assert one["log_file"].endswith("_b32_fp32_ga2112_1.log")
    no_acc = json.loads((tmp_path / "logs/index/bert_base_without_gradacc_mp_bs32_fp32_32_speed").read_text())
    assert no_acc["gradient_accumulation_steps"] == 1 and no_acc["FINAL_RESULT"] == 3000.5
    assert no_acc["n_valid"] == 2 and no_acc["n_invalid"] == 1 and no_acc["run_mode"] == "mp"


def test_cell_without_valid_trial_sets_fail_flag(tmp_path):
    r = _result()
    cell = r["cells"][0]
    cell.update(n_valid=0, median_speed=None)
    for t in cell["trials"]:
        t["valid"] = False
    paths = {p.name: json.loads(p.read_text()) for p in write_index_files(r, tmp_path)}
    failed = [d for d in paths.values() if d["cell_id"] == cell["cell_id"]][0]
    assert failed["JOB_FAIL_FLAG"] == 1 and failed["FINAL_RESULT"] == 0
