"""The run's own arguments, log stride, repeated steps,
impossible values, losses. Logs are built in each framework's real format (tests/unit/logwriters.py)."""

from __future__ import annotations

import math

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.core.model import Cell, ParallelLayout, TrialStatus, Trial, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.measure.validity import gate
from tests.unit import logwriters as W

WIN = Window(20, 100)


def trial(fw: str, bsz: int, topo: str = "1n1g", window: Window = WIN, layout=None, accumulation=None) -> Trial:
    cell = Cell(suite=fw, framework=fw, model="m", precision="amp", batch_size_per_device=bsz,
                topology=Topology.parse(topo), window=window, layout=layout, accumulation=accumulation)
    return Trial(cell, 1)


def run(fw: str, text: str, t: Trial, window: Window = WIN, **kw):
    f = get(fw)
    return gate(f, t, f.parse([text]), window, **kw)


# ------------------------------------------------------------------ 11.5 gradient accumulation
def test_dle_accumulation_counts_micro_batches_per_logged_step():
    """--train_batch_size=67584 --gradient_accumulation_steps=704 on 1 GPU: micro-batch 96, each logged
    (optimizer) step is 704 x 96 samples; at 544 samples/s a step takes 124.24 s (dlperf said 0.77)."""
    per_step = 96 * 704
    text = W.dle(list(range(1, 131)), per_step / 544.0, micro=96, acc=704, figure=543.1)
    r = run("pytorch_bert", text, trial("pytorch_bert", 96))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == pytest.approx(544.0, abs=0.02)
    assert r.metric.details["samples_per_step"] == per_step
    # the framework's own summary sits next to dlperf's figure (0.17 % apart: no flag)
    assert r.metric.details["framework_figure"] == 543.1
    assert r.metric.details["framework_figure_name"] == "DLE training_sequences_per_second"
    assert "flags" not in r.metric.details


def test_dle_summary_more_than_2_percent_off_is_flagged_not_invalid():
    text = W.dle(list(range(1, 131)), 96 / 500.0, micro=96, figure=450.0)
    r = run("pytorch_bert", text, trial("pytorch_bert", 96))
    assert r.status == TrialStatus.OK
    assert r.metric.value == pytest.approx(500.0, abs=0.02)
    assert r.metric.details["framework_disagreement"] == pytest.approx(-0.1)
    assert "differs from dlperf's 500.00 by -10.0% (> 2%)" in r.metric.details["flags"][0]


@pytest.mark.parametrize("kw,cell_kw,needle", [
    ({"micro": 64}, {}, "log's batch size per GPU is 64 (DLE PARAMETER Config line), the cell's is 96"),
    ({"acc": 4}, {"accumulation": 8}, "log's gradient accumulation is 4 (DLE PARAMETER Config line), "
                                                    "the cell's is 8"),
    ({"nproc": 8}, {}, "log's world size is 8 (DLE PARAMETER Config line), the cell's is 1 (1n1g)"),
])
def test_dle_args_disagreeing_with_the_cell_make_the_trial_invalid(kw, cell_kw, needle):
    text = W.dle(list(range(1, 131)), 0.2, **kw)
    r = run("pytorch_bert", text, trial("pytorch_bert", 96, **cell_kw))
    assert r.status == TrialStatus.INVALID_LOG
    assert needle in r.reason


def test_mxnet_namespace_accumulate_disagreeing_with_the_cell_is_invalid():
    text = W.mxnet_bert(120, 1, 250.0, total_batch=32, accumulate=4)
    r = run("mxnet_bert", text, trial("mxnet_bert", 32))
    assert r.status == TrialStatus.INVALID_LOG
    assert "log's accumulate is 4 (gluon-nlp Namespace line), the cell's is 1" in r.reason


def test_megatron_arguments_block_disagreeing_with_the_layout_is_invalid():
    lay = ParallelLayout("DP", "DP_1x1x1_2_1536x16", 1, 1, 1, 2, 2, 1536, 16, 16)
    args = {"micro_batch_size": 4, "global_batch_size": 2, "data_parallel_size": 1, "world_size": 1,
            "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "log_interval": 10}
    text = W.megatron(list(range(10, 131, 10)), 464.12, args=args)
    r = run("megatron_gpt", text, trial("megatron_gpt", 2, layout=lay), Window(10, 120))
    assert r.status == TrialStatus.INVALID_LOG
    assert "log's micro batch is 4 (arguments block: micro_batch_size), the cell's (DP_1x1x1_2_1536x16) is 2" in r.reason


def test_tf_flags_disagreeing_with_the_cell_are_invalid():
    flags = "+ python3 run_pretraining.py --train_batch_size=256 --num_gpus=8 --dtype=fp16"
    r = run("tensorflow_bert", W.tf(list(range(1, 121)), 0.1, flags=flags), trial("tensorflow_bert", 32))
    assert r.status == TrialStatus.INVALID_LOG
    assert "log's --train_batch_size is 256" in r.reason and "the cell's global batch is 32" in r.reason
    assert "log's world size is 8" in r.reason


# ------------------------------------------------------------------ 11.6 stride: steps, not lines
def test_dle_log_freq_50_counts_steps_not_lines():
    """A resumed DLE run logging every 50 steps: 2872, 2922, ... at 96 x 50 samples per 18.18 s."""
    steps = list(range(2872, 2872 + 50 * 8, 50))
    text = W.dle(steps, 96 / 264.0, micro=96, log_freq=50)
    r = run("pytorch_bert", text, trial("pytorch_bert", 96))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == pytest.approx(264.0, abs=0.02)  # dlperf said 5.28 (= 264 / 50)


def test_tf_stride_counts_steps():
    text = W.tf(list(range(10, 301, 10)), 32 / 300.0)
    r = run("tensorflow_bert", text, trial("tensorflow_bert", 32))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == pytest.approx(300.0, abs=0.05)


def test_dle_stride_log_too_short_names_the_step_it_needs():
    text = W.dle(list(range(50, 101, 50)), 1.0, log_freq=50)
    r = run("pytorch_bert", text, trial("pytorch_bert", 96))
    assert r.status == TrialStatus.INVALID_LOG
    assert "the window needs step 125; counted in steps" in r.reason


def test_extract_help_says_steps():
    import argparse

    from dlperf_tasks.cli import extract as cli_extract

    ap = argparse.ArgumentParser()
    cli_extract.register(ap.add_subparsers())
    sub = ap._subparsers._group_actions[0].choices["extract"]
    text = sub.format_help()
    assert "in steps" in text and "not log lines" in text


# ------------------------------------------------------------------ 11.7 repeated steps
def test_megatron_repeated_iteration_is_invalid():
    """One measured iteration printed twice (432.0 ms instead of 464.12 averaged in silently before)."""
    its = list(range(10, 131, 10))
    text = W.megatron(its[:5], 464.12) + W.megatron([50], 100.0, max_reserved=None) + W.megatron(its[5:], 464.12,
                                                                                                   max_reserved=None)
    r = run("megatron_gpt", text, trial("megatron_gpt", 2), Window(10, 120))
    assert r.status == TrialStatus.INVALID_LOG
    assert "iteration logged twice (1): 50: 464.12 and 100.0" in r.reason


@pytest.mark.parametrize("fw", ["pytorch_bert", "tensorflow_bert"])
def test_timestamp_frameworks_repeated_step_is_invalid(fw):
    steps = list(range(1, 131))
    steps.insert(60, 60)
    text = W.dle(steps, 0.2) if fw == "pytorch_bert" else W.tf(steps, 0.2)
    r = run(fw, text, trial(fw, 96 if fw == "pytorch_bert" else 32))
    assert r.status == TrialStatus.INVALID_LOG
    assert "iteration logged twice" in r.reason


def test_mxnet_one_line_per_rank_and_step_is_the_stated_exception():
    """Untagged gluon-nlp logs print each step once per rank: that repetition is legitimate (checked
    as 'N of world lines' per step); a step with more lines than ranks is not."""
    ok = run("mxnet_bert", W.mxnet_bert(120, 8, 250.0), trial("mxnet_bert", 32, "1n8g"))
    assert ok.status == TrialStatus.OK, ok.reason
    extra = W.mxnet_bert(120, 8, 250.0).replace("INFO:root:[step 50]", "INFO:root:[step 50]", 1)
    extra += "INFO:root:[step 50]\tmlm_loss=7.3\tnsp_loss= 0.72\tthroughput=16.0K tks/s\tlr=0 time=0.2, latency=9.0 ms/batch\n"
    bad = run("mxnet_bert", extra, trial("mxnet_bert", 32, "1n8g"))
    assert bad.status == TrialStatus.INVALID_LOG and "step 50 has 9 of 8 rank lines" in bad.reason


# ------------------------------------------------------------------ 11.8 impossible values
def test_megatron_latency_below_the_floor_is_invalid():
    text = W.megatron(list(range(10, 131, 10)), 1e-300)
    r = run("megatron_gpt", text, trial("megatron_gpt", 2), Window(10, 120))
    assert r.status == TrialStatus.INVALID_LOG
    assert "below the plausible floor 1 ms/iter (catalog plausible_max_per_gpu)" in r.reason


def test_throughput_above_the_suite_bound_is_invalid():
    text = W.dle(list(range(1, 131)), 96 / 5000.0)
    r = run("pytorch_bert", text, trial("pytorch_bert", 96), plausible_max_per_gpu=1000.0)
    assert r.status == TrialStatus.INVALID_LOG
    assert "5000 samples/s per GPU is above the plausible maximum 1000 (catalog plausible_max_per_gpu)" in r.reason
    assert run("pytorch_bert", text, trial("pytorch_bert", 96)).status == TrialStatus.OK  # default bound 20000


def test_catalog_suites_carry_a_plausibility_bound():
    from dlperf_tasks.catalog.loader import list_suites

    for s in list_suites():
        assert s.extra.get("plausible_max_per_gpu", 0) > 0, s.id


# ------------------------------------------------------------------ 16.5 losses
@pytest.mark.parametrize("fw,text,bsz,window", [
    ("pytorch_bert", W.dle(list(range(1, 131)), 0.2, losses={70: "nan"}), 96, WIN),
    ("tensorflow_bert", W.tf(list(range(1, 121)), 0.2, losses={70: "inf"}), 32, WIN),
    ("mxnet_bert", W.mxnet_bert(120, 1, 250.0, losses={70: "nan"}), 32, WIN),
    ("megatron_gpt", W.megatron(list(range(10, 131, 10)), 464.12, losses={70: "nan"}), 2, Window(10, 120)),
])
def test_non_finite_loss_makes_the_trial_invalid(fw, text, bsz, window):
    r = run(fw, text, trial(fw, bsz), window)
    assert r.status == TrialStatus.INVALID_LOG
    assert "non-finite loss (1): iteration 70" in r.reason


@pytest.mark.parametrize("fw,text,want", [
    ("pytorch_bert", W.dle([1, 2], 0.2, losses={2: "6.25"}), 6.25),
    ("tensorflow_bert", W.tf([1, 2], 0.2, losses={2: "6.25"}), 6.25),
    ("mxnet_bert", W.mxnet_bert(2, 1, 250.0, losses={2: "6.25"}), 6.25 + 0.72),
    ("megatron_gpt", W.megatron([10, 20], 464.0, losses={20: "6.25"}), 6.25),
])
def test_loss_is_parsed_per_iteration(fw, text, want):
    p = get(fw).parse([text])
    assert p.samples[-1].loss == pytest.approx(want)
    assert p.facts.final_loss == pytest.approx(want)


# ------------------------------------------------------------------ 11.11 memory: name and source
def test_megatron_memory_says_what_it_is():
    r = run("megatron_gpt", W.megatron(list(range(10, 131, 10)), 464.12), trial("megatron_gpt", 2), Window(10, 120))
    assert r.metric.memory_mib == 13694.0
    assert r.metric.memory_source.startswith("log: max reserved (MB), torch caching allocator")
    assert "not nvidia-smi" in r.metric.memory_source


# ------------------------------------------------------------------ newer Megatron lines
def test_megatron_torchrun_prefix_and_extra_spaces_parse():
    text = W.megatron(list(range(10, 131, 10)), 464.12, prefix="[default0]:[2024-05-01 10:00:00]")
    text = text.replace("elapsed time per iteration (ms): ", "elapsed time per iteration (ms) :  ")
    r = run("megatron_gpt", text, trial("megatron_gpt", 2), Window(10, 120))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == 464.12 and r.metric.memory_mib == 13694.0


# ------------------------------------------------------------------ the stream API (the watchdog's)
@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_stream_fed_in_pieces_equals_whole_parse(piece):
    text = W.dle(list(range(1, 131)), 0.2).replace("\n", "\r\n")
    f = get("pytorch_bert")
    st = f.stream()
    seen = []
    for i in range(0, len(text), piece):
        st.feed(text[i:i + piece].encode())
        seen.append(st.max_iteration)
    whole = f.parse([text])
    got = st.close()
    assert [(s.iteration, s.value) for s in got.samples] == [(s.iteration, s.value) for s in whole.samples]
    assert st.max_iteration == 130 and st.facts().iterations_seen[-1] == 130
    assert [m for m in seen if m is not None] == sorted(m for m in seen if m is not None)  # only grows
    assert got.facts.lines == whole.facts.lines == text.count("\n")


def test_stream_caps_line_length_and_lines_with_a_reason():
    f = get("tensorflow_bert")
    st = f.stream(max_lines=50)
    st.feed("x" * 300_000 + "\n")
    st.feed(W.tf(list(range(1, 121)), 0.2))
    p = st.close()
    assert any("longer than 262144 characters (cap" in e for e in p.facts.errors)
    assert any("more than 50 lines (cap on lines per trial)" in e for e in p.facts.errors)
    assert p.facts.lines == 50
    assert not math.isnan(p.samples[-1].value)


def test_stream_without_samples_keeps_constant_memory_for_a_watchdog():
    f = get("megatron_gpt")
    st = f.stream(keep_samples=False)
    for it in range(10, 100_001, 10):
        st.feed(W.megatron([it], 464.0, max_reserved=None, total=100_000))
        assert len(st.samples) == 0
    assert st.max_iteration == 100_000 and st.facts().iterations_seen[-1] == 100_000
