"""LLM log parsers on genuine public excerpts (tests/data/genuine_logs/llm/README.md names each
source) and on records cut, wrapped, glued or coloured the way real logs break."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import _megatron_llm_log as megatron
from dlperf_tasks.frameworks import _nccl_tests_log as nccl
from dlperf_tasks.frameworks import _nemo2_log as nemo2
from dlperf_tasks.frameworks import _torchtitan_log as titan

DATA = Path(__file__).resolve().parents[1] / "data" / "genuine_logs"
LLM = DATA / "llm"


def _read(name: str) -> list[str]:
    return (LLM / name).read_text().splitlines(keepends=True)


def test_torchtitan_genuine_2026_with_rank_prefix():
    p = titan.parse_lines(_read("torchtitan_pr3393.log"))
    assert [s.iteration for s in p.samples] == list(range(14, 22))
    assert [s.value for s in p.samples][:3] == [7282.0, 7334.0, 7313.0]
    assert p.samples[0].memory_mib == pytest.approx(9.46 * 1024)
    assert p.samples[0].loss == pytest.approx(3.24405)
    assert p.extra["grad_norm"][14] == pytest.approx(0.8319)
    assert p.extra["mfu_pct"][21] == pytest.approx(0.17)
    assert p.extra["memory_pct"][14] == pytest.approx(64.99)
    assert p.facts.errors == []


def test_torchtitan_repeated_ranks_kept_once_and_old_spelling():
    p = titan.parse_lines(_read("torchtitan_pr2389.log"))
    assert [s.iteration for s in p.samples] == [4, 5]
    assert p.samples[0].value == 10050.0 and p.extra["tflops_per_gpu"][4] == pytest.approx(314.71)
    old = titan.parse_lines(_read("torchtitan_pr1287.log"))
    assert [s.iteration for s in old.samples] == [200, 210, 220, 230, 240, 250]
    assert old.extra["grad_norm"] == {}  # 2025 lines print no grad_norm
    assert old.facts.errors == []


def test_torchtitan_colour_codes_na_mfu_and_thousands():
    line = ("\x1b[31mstep:  3  \x1b[32mloss:  9.1234  \x1b[38;2;180;60;0mmemory: 12.50GiB(15.70%)  "
            "\x1b[34mtps: 12,345  \x1b[36mtflops: 1,234.50  \x1b[35mmfu: N/A\x1b[39m\n")
    p = titan.parse_lines(["[rank0]:[titan] 2026-01-01 00:00:00,000 - root - INFO - " + line])
    assert p.samples[0].value == 12345.0
    assert p.extra["tflops_per_gpu"][3] == pytest.approx(1234.5)
    assert p.extra["mfu_pct"][3] is None


@pytest.mark.parametrize("text, words", [
    ("step:  5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps: 10,0\n", "cut short"),
    ("step:  5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)\n  tps: 10,007  tflops: 313.36\n",
     "cut short"),
    ("step:  5  loss:  7.07  memory: 6.91GiB(37.51%)  tps: 10,007  mfu: 13.93%step:  6  loss:  7.0\n", "glued"),
    ("step:  5  loss:  7.07  memory: 6.91GiB(37.51%)  tps: 10,007  mfu: 13.93%[titan] INFO hello\n", "glued"),
])
def test_torchtitan_broken_records_refused_never_half_read(text, words):
    p = titan.parse_lines([text])
    assert len(p.samples) == 0
    assert p.facts.errors and words in p.facts.errors[0] and "line 1" in p.facts.errors[0]


def test_torchtitan_validation_records_are_not_steps():
    lines = ["[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 5  loss:  3.24405  grad_norm:  0.8319  "
             "memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%\n",
             "[rank0]:[titan] 2026-05-18 16:04:47,000 - root - INFO - \x1b[33mvalidate step:  5  \x1b[32mloss:  3.1000  "
             "\x1b[36mmemory:  9.46GiB(64.99%)  \x1b[34mtps: 21,000\x1b[39m\n"]
    p = titan.parse_lines(lines)
    assert [(s.iteration, s.value) for s in p.samples] == [(5, 7282.0)] and p.facts.errors == []


def test_torchtitan_nan_loss_and_grad_norm_are_facts():
    p = titan.parse_lines(["step: 7  loss:     nan  grad_norm:     inf  memory: 1.00GiB(1.00%)  tps: 100  tflops: 0.01  mfu: 0.00%\n"])
    assert p.facts.nonfinite_losses and p.extra["nonfinite_grad_norms"] == [7]


def test_nemo2_genuine_tflops_and_scientific_tokens():
    p = nemo2.parse_lines(_read("nemo2_tflops.log"))
    assert [(s.iteration, s.value) for s in p.samples] == [(74, 8768.0), (75, 8748.0), (76, 8756.0)]
    assert p.extra["tflops_per_gpu"] == {74: 865.7, 75: 867.7, 76: 866.9}
    assert p.samples[0].memory_mib == pytest.approx(64286097408 / 2**20, abs=0.01)
    assert p.extra["global_batch_size"] == 128 and p.extra["train_iters"] == 99
    q = nemo2.parse_lines(_read("nemo2_tokens.log"))
    assert q.extra["tokens_per_sec_per_gpu"] == {97: 10730.0, 98: 10740.0, 99: 10730.0}
    assert q.facts.final_loss == pytest.approx(6.218)
    assert q.facts.errors == []


def test_nemo2_scientific_tflops_and_broken_records():
    ok = ("Training epoch 0, iteration 5/9 | global_batch_size: 8 | train_step_timing in s: 1.5e+00 | "
          "TFLOPS_per_GPU: 8.657e+02\n")
    p = nemo2.parse_lines([ok])
    assert p.samples[0].value == 1500.0 and p.extra["tflops_per_gpu"][5] == pytest.approx(865.7)
    cut = "Training epoch 0, iteration 6/9 | global_batch_size: 8 | train_step_tim\n"
    glued = ok.rstrip("\n") + "Training epoch 0, iteration 7/9 | train_step_timing in s: 1.4\n"
    bad = "Training epoch 0, iteration 8/9 | train_step_timing in s: 1.4 | TFLOPS_per_GPU: lots\n"
    p = nemo2.parse_lines([cut, glued, bad])
    errs = " | ".join(p.facts.errors)
    assert "line 1" in errs and "without a whole 'train_step_timing in s: X'" in errs
    assert "line 2: two NeMo step records glued" in errs
    assert "TFLOPS_per_GPU is 'lots'" in errs
    assert [s.iteration for s in p.samples] == [8]


def test_megatron_2026_energy_power_microseconds():
    p = megatron.parse_lines(_read("megatron_2026_cloudai.log"))
    assert [(s.iteration, s.value) for s in p.samples] == [(292, 3075.7), (293, 3037.2), (294, 3035.2)]
    assert p.extra["energy_j_per_gpu"][293] == pytest.approx(1982.6)
    assert p.extra["power_w_per_gpu"][294] == pytest.approx(652.5)
    assert p.extra["timestamps"][292] == "2026-02-06 20:55:02.918469"
    assert p.extra["tflops_per_gpu"][294] == pytest.approx(484.3)
    assert p.extra["global_batch_size"] == 32


def test_megatron_2024_genuine_through_the_same_parser():
    p = megatron.parse_lines((DATA / "megatron" / "megatron_issue756_moe.log").read_text().splitlines(True))
    assert len(p.samples) >= 2 and p.facts.errors == []
    assert all(v > 0 for v in p.extra["tflops_per_gpu"].values())


def test_megatron_cut_and_glued_records_refused():
    whole = (" [2026-02-06 20:55:02.918469] iteration      292/95367431 | consumed samples:         9344 | "
             "elapsed time per iteration (ms): 3075.7 | throughput per GPU (TFLOP/s/GPU): 478.0 |")
    cut = whole[:-40]
    p = megatron.parse_lines([cut + "\n", whole + whole + "\n", whole + "\n"])
    errs = " | ".join(p.facts.errors)
    assert "line 1: Megatron iteration record does not end with '|'" in errs
    assert "line 2: two Megatron iteration records glued" in errs
    assert len(p.samples) == 1


def test_nccl_tests_genuine_rows():
    r = nccl.parse_text((LLM / "nccl_tests_mooncake_pr3484.log").read_text())
    assert len(r.rows) == 11 and r.errors == []
    assert r.rows[0].size_bytes == 32768 and r.rows[-1].busbw_gbs == pytest.approx(300.51)
    assert r.peak_busbw_gbs == pytest.approx(300.51)
    assert r.rows[-1].algbw_gbs * 7 / 4 == pytest.approx(r.rows[-1].busbw_gbs, rel=0.01)  # 8 ranks: x 2*7/8


def test_nccl_tests_transport_avg_and_broken_row():
    text = ("node1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0\n"
            "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            "  1310720000     327680000     float     sum   1227613    1.07    1.07  0e+00   1227487    1.07    1.07  0e+00\n"
            "  1310720000     327680000     float     sum   1227613    1.07\n"
            "# Avg bus bandwidth    : 1.06775 \n")
    r = nccl.parse_text(text)
    assert r.transports == ["NET/Socket"] and r.socket_fallback
    assert r.avg_busbw_gbs == pytest.approx(1.06775)
    assert len(r.rows) == 1 and "line 4" in r.errors[0] and "6 fields" in r.errors[0]
    assert nccl.busbw_from_algbw(10.0, 2) == 10.0 and nccl.busbw_from_algbw(8.0, 8) == 14.0


def test_nccl_tests_json_rows_and_malformed():
    # the -J layout of nccl-tests@a0b82b2 src/util.cu (JSON file version 3); the figures are the genuine rows above
    doc = {"version": 3, "config": {"ngpus": 8}, "results": [
        {"size": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": "-1",
         "out_of_place": {"time": 27.76, "alg_bw": 37.78, "bus_bw": 66.11, "nwrong": 0},
         "in_place": {"time": 27.49, "alg_bw": 38.15, "bus_bw": 66.76, "nwrong": 0}},
        {"size": 2097152, "count": 524288, "type": "float", "redop": "sum", "root": "-1", "out_of_place": None,
         "in_place": {"cpu_time": 40.36, "alg_bw": 51.97, "bus_bw": 90.94, "nwrong": None}}]}
    r = nccl.parse_json(json.dumps(doc))
    assert [x.busbw_gbs for x in r.rows] == [66.11, 90.94] and r.errors == []
    assert r.rows[0].in_place_busbw_gbs == 66.76 and r.rows[1].time_us == 40.36
    bad = nccl.parse_json('{"results": [{"size": 1024, "out_of_place": {"bus_bw": "fast"}}]}')
    assert bad.rows == [] and "row 0" in bad.errors[0]
    assert "does not parse" in nccl.parse_json("{not json").errors[0]


def test_parsers_linear_time_and_bounded():
    line = ("[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: {i}  loss:  3.24405  grad_norm:  0.8319  "
            "memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%\n")
    small = "".join(line.format(i=i) for i in range(2000))
    big = "".join(line.format(i=i) for i in range(20000))
    t0 = time.process_time()
    titan.parse_lines([small])
    t1 = time.process_time()
    p = titan.parse_lines([big])
    t2 = time.process_time()
    assert len(p.samples) == 20000
    assert (t2 - t1) < 25 * max(t1 - t0, 1e-3)  # 10x the input: about 10x the time, never quadratic


def test_lognames_llm_precisions_any_model_word_and_layout_case():
    from types import SimpleNamespace

    from dlperf_tasks.core.model import ParallelLayout, Window
    from dlperf_tasks.core.topology import Topology
    from dlperf_tasks.measure import lognames

    topo = Topology(1, 8)
    fsdp = ParallelLayout(group="fsdp", case="fsdp_8", dp=8, mp=1, pp=1, micro_batch=2, global_batch=16,
                          hidden_size=4096, num_heads=32, num_layers=32, seq_length=8192)
    suite = SimpleNamespace(id="llama31-8b-torchtitan", framework="torchtitan_llama", model="llama3.1-8b",
                            layouts=[(topo, fsdp)])
    files = [f"fsdp_8/1n8g/llama31_b2_{p}_1.log" for p in ("bf16", "fp8", "mxfp8", "nvfp4", "fp32", "amp")]
    files += ["1n8g/llama31_b2_bf16_2.log", "tp_2/1n8g/llama31_b2_bf16_3.log"]
    trials, skipped, seen = lognames.discover(files, suite, Window(warmup=10, measure=20))
    precisions = sorted(t.trial.cell.precision for t in trials)
    assert precisions == ["amp", "bf16", "fp32", "fp8", "mxfp8", "nvfp4"]
    assert all(t.trial.cell.layout is fsdp for t in trials)
    assert seen == 8 and len(skipped) == 2
    assert all("naming one of its layout cases for 1n8g (fsdp_8)" in why
               for _, why in skipped)


def test_tokens_per_gpu_from_megatron_log_and_cell():
    from dlperf_tasks.core.model import Cell, ParallelLayout
    from dlperf_tasks.core.topology import Topology
    from dlperf_tasks.frameworks import _llm_logs

    lay = ParallelLayout(group="DP", case="DP_8x1x1_32_4096x32", dp=8, mp=1, pp=1, micro_batch=4, global_batch=32,
                         hidden_size=4096, num_heads=32, num_layers=32, seq_length=8192)
    cell = Cell("llama", "megatron_bridge", "llama3-8b", "bf16", 4, Topology(1, 8), layout=lay)
    p = megatron.parse_lines(_read("megatron_2026_cloudai.log"))
    got = _llm_logs.tokens_per_gpu_samples(p, cell)
    assert got[292] == pytest.approx(32 * 8192 / 3.0757 / 8)
    t = titan.parse_lines(_read("torchtitan_pr3393.log"))
    assert _llm_logs.tokens_per_gpu_samples(t, Cell("t", "torchtitan_llama", "m", "bf16", 2, Topology(1, 8)))[14] == 7282
    n = nemo2.parse_lines(_read("nemo2_tokens.log"))
    with pytest.raises(ValueError, match="sequence length"):
        _llm_logs.tokens_per_gpu_samples(n, Cell("n", "nemo2", "m", "bf16", 1, Topology(1, 8)))
    assert _llm_logs.stream_class("nemo2") is nemo2.Nemo2Stream


def test_megatron_bridge_memory_report_in_gb():
    # the spelling of Megatron-Bridge@067f987 training/utils/train_utils.py (report_memory over MEMORY_KEYS,
    # "*-bytes" renamed "*-gigabytes"; printed after the first two logged iterations; values made up)
    first = ("[Rank 0] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 20.5 | mem-active-gigabytes: 20.5 | "
             "mem-inactive-gigabytes: 0.51234 | mem-reserved-gigabytes: 58.1 | mem-max-allocated-gigabytes: 50.25 | "
             "mem-max-active-gigabytes: 50.25 | mem-max-inactive-gigabytes: 3.1245 | mem-max-reserved-gigabytes: 58.1 | "
             "mem-alloc-retires: 0 | mem-allocated-count: 4123\n")
    second = first.replace("after 1 iterations", "after 2 iterations").replace("max-reserved-gigabytes: 58.1",
                                                                              "max-reserved-gigabytes: 61.2")
    p = megatron.parse_lines([first, second])
    assert p.facts.errors == []
    assert p.extra["memory_gb"]["mem-max-reserved-gigabytes"] == 61.2
    assert p.extra["memory_gb"]["mem-max-allocated-gigabytes"] == 50.25
    assert "mem-allocated-count" not in p.extra["memory_gb"] and "mem-alloc-retires" not in p.extra["memory_gb"]
    assert p.extra["memory_mib"] == pytest.approx(61.2e9 / 2**20, abs=0.01)
    bad = megatron.parse_lines(["[Rank 0] (after 2 iterations) memory (GB) | mem-max-reserved-gigabytes: lots\n"])
    assert "memory field 'mem-max-reserved-gigabytes' is 'lots'" in bad.facts.errors[0]
    assert "memory_mib" not in bad.extra
