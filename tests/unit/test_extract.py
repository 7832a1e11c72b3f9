"""Extraction from DLPerf-layout trees assembled from the fixture logs (real parsers, real files).

Expected speeds are the ones DLPerf's own extractors gave for each fixture
(tests/data/fixture_logs/*/README.md)."""

import shutil
import tarfile
from pathlib import Path

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import ExtractError
from dlperf_tasks.measure.extract import TRIAL_FILE_RE, extract_tree, topology_from_path
from dlperf_tasks.core.model import MetricKind, TrialStatus, Window
from dlperf_tasks.report.result_json import extract_result

FIX = Path(__file__).resolve().parent.parent / "data" / "fixture_logs"


def put(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def speeds(res):
    return {t.trial.cell.topology.name: (t.status.value, round(t.metric.value, 2) if t.metric else None)
            for t in res.trials}


@pytest.mark.parametrize("suite,fixture,bz,window,expected", [
    ("mxnet-bert", "mxnet_bert/bz32", 32, Window(100, 100), {"1n1g": 149.86, "1n8g": 1056.34}),
    ("mxnet-bert", "mxnet_bert/tag_output_variant", 32, Window(100, 100), {"1n2g": 269.76}),
    ("tensorflow-bert", "tensorflow_bert/bz32", 32, None, {"1n1g": 103.60, "1n8g": 675.92}),
    ("mxnet-resnet50", "mxnet_resnet50/bz128", 128, None, {"1n1g": 384.05, "1n8g": 2555.20}),
    # DLPerf's timestamp rule on the synthetic fixtures (the suite's default is seed 001's summary rule)
    ("pytorch-bert", "pytorch_bert/fp16_ngc_bert_b96", 96, Window(20, 100), {"1n1g": 463.11, "2n8g": 5431.78}),
])
def test_fixture_speeds_match_dlperf(tmp_path, suite, fixture, bz, window, expected):
    tree = tmp_path / "logs"
    shutil.copytree(FIX / fixture, tree)
    res = extract_tree(load_suite(suite), tree, bz, window)
    assert speeds(res) == {k: ("OK", v) for k, v in expected.items()}
    assert all(c.n_valid == 1 and c.n_invalid == 0 for c in res.cells)


def test_megatron_latency_cases_from_last_node(tmp_path):
    tree = tmp_path / "megatron"
    shutil.copytree(FIX / "megatron_gpt", tree)
    res = extract_tree(load_suite("megatron-gpt"), tree)
    got = {t.trial.cell.layout.case: (t.status.value, round(t.metric.value, 2), t.metric.kind) for t in res.trials}
    assert got == {"DP_1x1x1_2_1536x16": ("OK", 464.12, MetricKind.LATENCY),
                   "DP_16x1x1_32_1536x16": ("OK", 664.22, MetricKind.LATENCY)}
    two = [t for t in res.trials if t.trial.cell.topology.name == "2n8g"][0]
    assert [Path(p).name for p in two.log_paths] == [
        "megatron_lm_perf_2n8g_dp16_mp1_pp1_mbs2_gbs32_l16_hsz1536_ahs16_pretrain_0.log",
        "megatron_lm_perf_2n8g_dp16_mp1_pp1_mbs2_gbs32_l16_hsz1536_ahs16_pretrain_1.log"]
    assert all(c.speedup is None and c.speedup_state == "not_applicable" for c in res.cells)
    assert all(c.memory_mib and c.memory_mib > 0 for c in res.cells)


def test_megatron_without_last_node_log_is_invalid(tmp_path):
    name = "megatron_lm_perf_2n8g_dp16_mp1_pp1_mbs2_gbs32_l16_hsz1536_ahs16_pretrain_0.log"
    put(FIX / "megatron_gpt" / name, tmp_path / name)
    (t,) = extract_tree(load_suite("megatron-gpt"), tmp_path).trials
    assert t.status == TrialStatus.INVALID_LOG and "log of node 1" in t.reason and name in t.reason


def test_seed_tree_seven_trials_and_deeper_layout(tmp_path):
    """logs/<framework>/<model>/bz<B>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.log, read from the top."""
    src = FIX / "mxnet_bert" / "bz32"
    base = tmp_path / "logs" / "mxnet" / "bert" / "bz32"
    for topo in ("1n1g", "1n8g"):
        for i in range(1, 8):
            put(src / topo / "bert_b32_fp32_1.log", base / topo / f"bert_base_b32_fp32_{i}.log")
    (base / "README.txt").write_text("not a log")
    res = extract_tree(load_suite("mxnet-bert"), tmp_path / "logs", 32, Window(100, 100))
    by = {c.cell.topology.name: c for c in res.cells}
    assert by["1n1g"].values == [149.86] * 7 and by["1n8g"].median == 1056.34
    assert by["1n8g"].speedup == round(1056.34 / 149.86, 2) == 7.05
    assert extract_result(res)["dlperf"]["bz32"]["bert-base"]["1n8g"]["median_speed"] == 1056.34


def test_ten_node_topology_is_parsed_by_regex(tmp_path):
    assert topology_from_path("logs/x/bz32/10n8g/bert_b32_fp32_1.log").name == "10n8g"
    assert topology_from_path("16n8g/a/b.log").name == "16n8g"
    assert topology_from_path("bz32/b.log") is None
    put(FIX / "mxnet_bert/bz32/1n8g/bert_b32_fp32_1.log", tmp_path / "10n8g" / "bert_b32_fp32_1.log")
    (t,) = extract_tree(load_suite("mxnet-bert"), tmp_path, 32, Window(100, 100)).trials
    assert t.trial.cell.topology.world_size == 80
    # an 8-rank log cannot be an 80-GPU trial: gated, with its raw value kept
    assert t.status == TrialStatus.INVALID_LOG and "of 80 rank lines" in t.reason


def test_truncated_and_crashed_trial_is_excluded_with_reason(tmp_path):
    src = FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log"
    put(src, tmp_path / "1n1g" / "bert_b32_fp32_1.log")
    put(src, tmp_path / "1n1g" / "bert_b32_fp32_2.log")
    lines = src.read_text().splitlines(keepends=True)
    cut = [l for l in lines if "[step 151]" not in l]  # one step missing
    (tmp_path / "1n1g" / "bert_b32_fp32_3.log").write_text("".join(cut))
    (tmp_path / "1n1g" / "bert_b32_fp32_4.log").write_text(
        "".join(lines[: len(lines) // 2]) + "Traceback (most recent call last):\nRuntimeError: boom\n")
    res = extract_tree(load_suite("mxnet-bert"), tmp_path, 32, Window(100, 100))
    (cell,) = res.cells
    assert (cell.n_valid, cell.n_invalid, cell.values) == (2, 2, [149.86, 149.86])
    bad = {t.trial.index: t for t in cell.invalid_trials}
    assert "missing iterations 151" in bad[3].reason
    assert "Traceback" in bad[4].reason and "log ends at iteration" in bad[4].reason
    assert bad[4].samples  # raw numbers kept


def test_other_node_crash_invalidates_trial(tmp_path):
    src = FIX / "pytorch_bert/fp16_ngc_bert_b96/pytorch/2n8g/bert-base-adam-training_b96_fp16_1.log"
    put(src, tmp_path / "2n8g" / "bert-base-adam-training_b96_fp16_1.log")
    (tmp_path / "2n8g" / "bert-base-adam-training_b96_fp16_1.node1.log").write_text(
        "device: cuda:0 n_gpu: 1\nNCCL error in: /opt/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:784, unhandled system error\n")
    (t,) = extract_tree(load_suite("pytorch-bert"), tmp_path, 96, Window(20, 100)).trials  # DLPerf's rule
    assert t.status == TrialStatus.INVALID_LOG and "node 1: NCCL error" in t.reason
    assert len(t.log_paths) == 2 and round(t.metric.value, 2) == 5431.78  # raw value still shown


def test_batch_size_filter_and_skipped_files(tmp_path):
    put(FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", tmp_path / "1n1g" / "bert_b32_fp32_1.log")
    put(FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", tmp_path / "1n1g" / "bert_b24_fp32_1.log")
    put(FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", tmp_path / "nodir" / "bert_b32_fp32_1.log")
    res = extract_tree(load_suite("mxnet-bert"), tmp_path, 32, Window(100, 100))
    assert len(res.trials) == 1
    reasons = dict(res.skipped)
    assert "batch size 24" in reasons["1n1g/bert_b24_fp32_1.log"]
    assert "no <N>n<G>g directory" in reasons["nodir/bert_b32_fp32_1.log"]


def test_mixed_prefixes_need_prefix(tmp_path):
    put(FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", tmp_path / "1n1g" / "bert_b32_fp32_1.log")
    put(FIX / "mxnet_resnet50/bz128/1n1g/rn50_b128_fp32_1.log", tmp_path / "1n1g" / "rn50_b32_fp32_1.log")
    with pytest.raises(ExtractError, match="mixes several workloads.*'bert'.*'rn50'"):
        extract_tree(load_suite("mxnet-bert"), tmp_path, 32, Window(100, 100))
    res = extract_tree(load_suite("mxnet-bert"), tmp_path, 32, Window(100, 100), prefix="bert")
    assert [t.status for t in res.trials] == [TrialStatus.OK]


def test_empty_or_missing_dir_names_dir_and_pattern(tmp_path):
    (tmp_path / "1n1g").mkdir()
    (tmp_path / "1n1g" / "notes.log").write_text("hello")
    with pytest.raises(ExtractError) as e:
        extract_tree(load_suite("mxnet-bert"), tmp_path, 32)
    msg = str(e.value)
    assert str(tmp_path) in msg and "_b<B>_" in msg and "notes.log (name does not match" in msg
    with pytest.raises(ExtractError, match="does not exist"):
        extract_tree(load_suite("mxnet-bert"), tmp_path / "nope", 32)


def test_tar_gz_archive_is_read_without_unpacking(tmp_path):
    tree = tmp_path / "logs"
    shutil.copytree(FIX / "tensorflow_bert/bz32", tree / "tensorflow" / "bert" / "bz32")
    archive = tmp_path / "logs.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tree, arcname="logs")
    res = extract_tree(load_suite("tensorflow-bert"), archive, 32)
    assert speeds(res) == {"1n1g": ("OK", 103.6), "1n8g": ("OK", 675.92)}
    assert res.trials[0].log_paths == ["logs/tensorflow/bert/bz32/1n1g/bert_b32_fp32_1.log"]


def test_file_name_pattern():
    m = TRIAL_FILE_RE.match("bert-base-adam-training_b96_fp16_1.node3.log")
    assert (m["prefix"], m["bz"], m["prec"], m["trial"], m["node"]) == ("bert-base-adam-training", "96", "fp16", "1", "3")
    m = TRIAL_FILE_RE.match("bert_b64_fp16_xla_12.log")
    assert (m["xla"], m["trial"]) == ("_xla", "12")
    assert TRIAL_FILE_RE.match("bert_b64_fp32.log") is None


def test_progress_reported_for_large_trees(tmp_path):
    src = FIX / "tensorflow_bert/bz32/1n1g/bert_b32_fp32_1.log"
    for i in range(1, 61):
        put(src, tmp_path / "1n1g" / f"bert_b32_fp32_{i}.log")
    import dlperf_tasks.measure.extract as ex
    old = ex._PROGRESS_EVERY_S
    ex._PROGRESS_EVERY_S = 0.0
    msgs = []
    try:
        res = extract_tree(load_suite("tensorflow-bert"), tmp_path, 32, progress=msgs.append)
    finally:
        ex._PROGRESS_EVERY_S = old
    assert res.cells[0].n_valid == 60 and res.cells[0].median == 103.6
    assert msgs and msgs[-1].startswith("dlperf extract: 60/60 trials parsed")


def test_megatron_and_dlperf_logs_are_not_mixed_up(tmp_path):
    name = "megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_l16_hsz1536_ahs16_pretrain_0.log"
    put(FIX / "megatron_gpt" / name, tmp_path / name)
    put(FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", tmp_path / "1n1g" / "bert_b32_fp32_1.log")
    res = extract_tree(load_suite("megatron-gpt"), tmp_path)
    assert [t.trial.cell.layout.case for t in res.trials] == ["DP_1x1x1_2_1536x16"]
    assert "reads Megatron logs" in dict(res.skipped)["1n1g/bert_b32_fp32_1.log"]
    res = extract_tree(load_suite("mxnet-bert"), tmp_path, 32, Window(100, 100))
    assert [t.trial.cell.topology.name for t in res.trials] == ["1n1g"]
    assert "not a Megatron suite" in dict(res.skipped)[name]


def test_gate_run_logs_reads_a_sweep_run_dir(tmp_path):
    """A sweep's run dir holds logs at Framework.log_relpath; runtime facts (exit codes) are applied."""
    from dlperf_tasks import frameworks
    from dlperf_tasks.measure.extract import gate_run_logs
    from dlperf_tasks.core.model import Cell, Trial
    from dlperf_tasks.core.topology import Topology

    cell = Cell("pytorch-bert", "pytorch_bert", "bert-base", "amp", 96, Topology.parse("2n8g"))
    trial = Trial(cell, 1)
    fw = frameworks.get("pytorch_bert")
    put(FIX / "pytorch_bert/fp16_ngc_bert_b96/pytorch/2n8g/bert-base-adam-training_b96_fp16_1.log",
        tmp_path / fw.log_relpath(trial, 0))
    r = gate_run_logs(trial, tmp_path, exit_codes={"node1": 0, "node2": 0}, nodes=["node1", "node2"])
    assert r.status == TrialStatus.OK and round(r.metric.value, 2) == 5431.78 and r.nodes == ["node1", "node2"]
    r = gate_run_logs(trial, tmp_path, exit_codes={"node1": 0, "node2": 1})
    assert r.status == TrialStatus.NONZERO_EXIT and "node2 exited with code 1" in r.reason
    r = gate_run_logs(Trial(cell, 2), tmp_path, runtime_status=TrialStatus.TIMEOUT, runtime_reason="ran past 3600 s")
    assert r.status == TrialStatus.TIMEOUT and r.reason.startswith("ran past 3600 s; log of node 0")
