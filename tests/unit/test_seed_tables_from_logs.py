"""Every seed's printed table reproduced from LOGS (not from per-trial numbers):
logs in each framework's real format are written with the seed's per-trial speeds, then read back
with ``extract_tree`` (the whole parse -> gate -> aggregate -> result JSON path)."""

from __future__ import annotations

import pprint
import re

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.measure.extract import extract_tree
from dlperf_tasks.core.model import Window
from dlperf_tasks.report.markdown import latency_table, throughput_table
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.report.result_json import extract_result
from tests.unit import logwriters as W
from tests.unit.dlperf_seed_data import SEEDS


def _write_seed_logs(root, seed) -> None:
    bsz = seed["batch_size_per_device"]
    for topo_name, trials in seed["TRIALS"].items():
        world = Topology.parse(topo_name).world_size
        for index, speed in trials.items():
            if seed["framework"] == "mxnet_bert":
                # every rank prints every step at the latency that gives this global speed
                text = W.mxnet_bert(120, world, 1000.0 * bsz * world / speed, total_batch=bsz * world)
                name = f"bert_b{bsz}_fp32_{index}.log"
            elif seed["framework"] == "tensorflow_bert":
                text = W.tf(list(range(1, 121)), bsz * world / speed)
                name = f"bert_b{bsz}_fp32_{index}.log"
            else:
                text = W.rn50(120, speed)
                name = f"rn50_b{bsz}_fp32_{index}.log"
            W.write(root / topo_name / name, text)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_table_and_dict_from_logs(tmp_path, name):
    """Seeds 000 (MXNet BERT), 003 (TF BERT) and 004 (RN50): table and result dict from logs."""
    seed = SEEDS[name]
    _write_seed_logs(tmp_path, seed)
    res = extract_tree(load_suite(seed["suite"]), tmp_path)
    assert all(t.valid for t in res.trials), [t.reason for t in res.trials if not t.valid]
    result = extract_result(res)
    assert throughput_table(result["cells"], seed["style"]) == seed["TABLE"]
    text = pprint.pformat(result["dlperf"][f"bz{seed['batch_size_per_device']}"])
    assert [l.strip() for l in text.splitlines()] == [l.strip() for l in seed["DICT_TEXT"].splitlines()]


# ------------------------------------------------------------------ seed 001 (NGC PyTorch BERT)
SEED_001_TABLE = """|卡数 | FP32(BS=32) | FP32(BS=48) | AMP(BS=64) | AMP(BS=96)|
|:-----:|:-----:|:-----:|:-----:|:-----:|
|1 | 127.09  | 126.48  | 511.13  | 532.24  |
|8 | 1018.40  | 1012.80  | 4063.19  | 4207.36 |"""
SEED_001_COLUMNS = [("fp32", 32), ("fp32", 48), ("amp", 64), ("amp", 96)]


def _cells_of(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()]


def seed_001_table(result) -> str:
    """Seed 001's speed table (GPU count rows x precision/batch columns) from a result JSON."""
    by = {(c["precision"], c["batch_size_per_device"], c["gpus"]): c["median_speed"] for c in result["cells"]}
    head = "|卡数 | " + " | ".join(f"{'FP32' if p == 'fp32' else 'AMP'}(BS={b})" for p, b in SEED_001_COLUMNS) + "|"
    rows = [head, "|:-----:|" + ":-----:|" * len(SEED_001_COLUMNS)]
    for gpus in sorted({k[2] for k in by}):
        rows.append(f"|{gpus} | " + " | ".join(f"{by[(p, b, gpus)]:.2f}" for p, b in SEED_001_COLUMNS) + " |")
    return "\n".join(rows)


def test_seed_001_table_from_logs_with_gradient_accumulation(tmp_path):
    """DLPerf's timestamp rule on DLE phase-1 logs with gradient accumulation (32 micro-batches per
    logged optimizer step); the Config line carries the micro-batch, the speed counts every sample.
    (Seed 001's own rule on its own logs: tests/unit/test_seed001_reproduced.py.)"""
    want = {(p, b, int(row[0])): float(v) for row in _cells_of(SEED_001_TABLE)[2:]
            for (p, b), v in zip(SEED_001_COLUMNS, row[1:])}
    acc = 32
    for (prec, bsz, gpus), speed in want.items():
        tag = "fp16" if prec == "amp" else "fp32"
        text = W.dle(list(range(1, 151)), bsz * acc * gpus / speed, micro=bsz, acc=acc, nproc=gpus,
                     figure=round(speed * 0.995, 2), fp16=prec == "amp")
        W.write(tmp_path / f"bz{bsz}" / f"1n{gpus}g" / f"bert-base-lamb-training_b{bsz}_{tag}_1.log", text)
    res = extract_tree(load_suite("pytorch-bert"), tmp_path, window=Window(20, 100))
    assert all(t.valid for t in res.trials), [t.reason for t in res.trials if not t.valid]
    assert {t.metric.details["samples_per_step"] for t in res.trials} == {b * acc * g for _, b, g in want}
    result = extract_result(res)
    assert _cells_of(seed_001_table(result)) == _cells_of(SEED_001_TABLE)
    # and the Paddle-convention index files carry the same speeds, one file per cell
    import json

    from dlperf_tasks.report.index_files import write_index_files

    paths = write_index_files(result, tmp_path / "logs" / "index")
    docs = [json.loads(p.read_text()) for p in paths]
    assert len(docs) == 8
    assert {(d["fp_item"], d["batch_size"], d["gpu_num"]): d["FINAL_RESULT"] for d in docs} == {
        ("fp16" if p == "amp" else p, b, g): v for (p, b, g), v in want.items()}
    assert {d["run_mode"] for d in docs} == {"sp", "mp"} and all(d["JOB_FAIL_FLAG"] == 0 for d in docs)
    assert all(p.name.endswith(f"_bs{d['batch_size']}_{d['fp_item']}_{d['gpu_num']}_speed") for p, d in zip(paths, docs))


# ------------------------------------------------------------------ seed 002 (Megatron-LM GPT)
#: case -> (log names as seed 002 publishes them, node index last; latency ms) from the seed's tables
SEED_002 = {
    "DP_1x1x1_2_1536x16": ("megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_pretrain_{k}.log", 464.12),
    "DP_8x1x1_16_1536x16": ("megatron_lm_perf_1n8g_dp8_mp1_pp1_mbs2_gbs16_pretrain_{k}.log", 480.96),
    "DP_16x1x1_32_1536x16": ("megatron_lm_perf_2n8g_dp16_mp1_pp1_mbs2_gbs32_pretrain_{k}.log", 664.46),
    "DP_32x1x1_64_1536x16": ("megatron_lm_perf_4n8g_dp32_mp1_pp1_mbs2_gbs64_pretrain_{k}.log", 683.51),
    "MP_1x1x1_8_768x12": ("megatron_pretrain_gpt_1n1d_dp1_mp1_pp1_mbz8_gbz8_s2048_l12_h768_nh12_rank{k}.log", 611.2),
    "MP_1x8x1_16_1536x16": ("megatron_lm_perf_1n8g_dp1_mp8_pp1_mbs16_gbs16_pretrain_{k}.log", 692.44),
    "MP_1x16x1_16_3072x16": ("megatron_lm_perf_2n8g_dp1_mp16_pp1_mbs16_gbs16_MP_1x16x1_16_3072x16_{k}.log", 5610.23),
    "MP_1x32x1_16_3072x32": ("megatron_lm_perf_4n8g_dp1_mp32_pp1_mbs16_gbs16_pretrain_{k}.log", 13037.85),
    "2D_8x1x1_16_1536x16": ("megatron_pretrain_gpt_1n8d_dp8_mp1_pp1_mbz2_gbz16_s2048_l16_h1536_nh16_rank{k}.log", 480.22),
    "2D_1x8x1_16_1536x16": ("megatron_pretrain_gpt_1n8d_dp1_mp8_pp1_mbz16_gbz16_s2048_l16_h1536_nh16_rank{k}.log", 664.64),
    "2D_2x4x1_16_1536x16": ("megatron_pretrain_gpt_1n8d_dp2_mp4_pp1_mbz8_gbz16_s2048_l16_h1536_nh16_rank{k}.log", 576.48),
    "2D_4x2x1_16_1536x16": ("megatron_pretrain_gpt_1n8d_dp4_mp2_pp1_mbz4_gbz16_s2048_l16_h1536_nh16_rank{k}.log", 593.68),
    "2D_2x8x1_16_2304x24": ("megatron_pretrain_gpt_2n8d_dp2_mp8_pp1_mbz8_gbz16_s2048_l24_h2304_nh24_rank{k}.log", 1313.52),
    "2D_4x8x1_32_2304x24": ("megatron_pretrain_gpt_4n8d_dp4_mp8_pp1_mbz8_gbz32_s2048_l24_h2304_nh24_rank{k}.log", 1508.48),
    "DP_PP_8x1x4_512_1536x16": ("megatron_lm_perf_4n8g_dp8_mp1_pp4_mbs2_gbs512_pretrain_1536_16_16_{k}.log", 4893.55),
    "MP_PP_1x8x4_512_2304x24": ("megatron_lm_perf_4n8g_dp1_mp8_pp4_mbs16_gbs512_pretrain_{k}.log", 22166.85),
    "2D_PP_2x4x4_512_2304x24": ("megatron_pretrain_gpt_4n8d_dp2_mp4_pp4_mbz8_gbz512_s2048_l24_h2304_nh24_rank{k}.log",
                                15331.23),
    "2D_PP_2x8x2_512_2304x24": ("megatron_lm_perf_4n8g_dp2_mp8_pp2_mbs8_gbs512_pretrain_{k}.log", 16281.51),
}
#: seed 002's latency column, as printed (one case has no space before "(ms)")
SEED_002_LATENCY_TEXT = {case: f"{lat} (ms)" if case != "MP_1x16x1_16_3072x16" else f"{lat}(ms)"
                         for case, (_, lat) in SEED_002.items()}


def test_seed_002_every_case_latency_from_its_published_log_names(tmp_path):
    suite = load_suite("megatron-gpt")
    topo_of = {lay.case: t for t, lay in suite.layouts}
    assert set(topo_of) == set(SEED_002)
    for case, (pattern, lat) in SEED_002.items():
        nodes = topo_of[case].nodes
        for k in range(nodes):  # iteration lines in the last node's log, the memory line in node 0's
            its = list(range(10, 131, 10)) if k == nodes - 1 else []
            text = W.megatron(its, lat) if its else (
                "[Rank 0] (after 10 iterations) memory (MB) | allocated: 3122.5 | max allocated: 12234.8 | "
                "reserved: 13694.0 | max reserved: 13694.0\n")
            W.write(tmp_path / case / pattern.format(k=k), text)
    res = extract_tree(suite, tmp_path)
    assert len(res.trials) == 18 and all(t.valid for t in res.trials), [t.reason for t in res.trials if not t.valid]
    result = extract_result(res)
    assert {c: v["latency_ms"] for c, v in result["dlperf"]["latency"].items()} == {
        c: lat for c, (_, lat) in SEED_002.items()}
    table = latency_table(result["cells"])
    for case, text in SEED_002_LATENCY_TEXT.items():
        row = next(line for line in table.splitlines() if f"| {case} |" in line)
        got = row.split("|")[2].strip()
        assert re.sub(r"\s+", "", got) == re.sub(r"\s+", "", text), (case, got)
    # the memory figure is the log's allocator peak, named as such (seed 002's column is nvidia-smi)
    assert {t.metric.memory_source.split(",")[0] for t in res.trials} == {"log: max reserved (MB)"}


def test_result_json_carries_memory_source_and_framework_figure(tmp_path):
    """The record says what the memory number is and keeps DLE's own figure."""
    from dlperf_tasks.report.result_json import load_result, trials_from_result, write_result

    W.write(tmp_path / "meg" / "DP_1x1x1_2_1536x16" / "1n1g" / "1" /
            "megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_pretrain_0.log", W.megatron(list(range(10, 131, 10)), 464.12))
    result = extract_result(extract_tree(load_suite("megatron-gpt"), tmp_path / "meg"))
    metric = result["cells"][0]["trials"][0]["metric"]
    assert metric["memory_mib"] == 13694.0 and metric["memory_source"].startswith("log: max reserved (MB)")
    back = trials_from_result(load_result(write_result(result, tmp_path / "r.json")))
    assert back[0].metric.memory_source == metric["memory_source"]

    W.write(tmp_path / "pt" / "1n1g" / "bert_b96_fp16_1.log", W.dle(list(range(1, 131)), 96 / 500.0, figure=450.0))
    result = extract_result(extract_tree(load_suite("pytorch-bert"), tmp_path / "pt", window=Window(20, 100)))
    details = result["cells"][0]["trials"][0]["metric"]["details"]
    assert details["framework_figure"] == 450.0 and details["framework_figure_name"] == "DLE training_sequences_per_second"
    assert "differs from dlperf's 500.00" in details["flags"][0]
