"""Values outside physical sense make a trial invalid, with the bound in the reason."""

from __future__ import annotations

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.core.model import Cell, MetricKind, ParallelLayout, Trial, TrialMetric, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.measure.validity import DAY_MS, gate, plausibility_problem
from tests.unit import logwriters as W

MEG_WIN = Window(10, 120)
ITS = list(range(10, 131, 10))


def _trial(fw: str, bsz: int, topo: str = "1n1g", window: Window = Window(20, 100), layout=None) -> Trial:
    cell = Cell(suite=fw, framework=fw, model="m", precision="amp", batch_size_per_device=bsz,
                topology=Topology.parse(topo), window=window, layout=layout)
    return Trial(cell, 1)


def _run(fw: str, text: str, t: Trial, window: Window, **kw):
    f = get(fw)
    return gate(f, t, f.parse([text]), window, **kw)


def _gpt(hidden=1024, layers=24, gbs=8, topo_gpus=1) -> ParallelLayout:
    return ParallelLayout(group="DP", case=f"DP_{topo_gpus}x1x1_{gbs}_{hidden}x{layers}", dp=topo_gpus, mp=1, pp=1,
                          micro_batch=gbs // topo_gpus, global_batch=gbs, hidden_size=hidden, num_heads=16,
                          num_layers=layers, seq_length=1024)


def test_megatron_iteration_longer_than_a_day_is_invalid():
    """Before: one 1e308 ms line gave status OK at 8.3e306 ms/iter."""
    text = W.megatron(ITS, {**{i: 464.1 for i in ITS}, 70: 1e308}, gbs=8)
    r = _run("megatron_gpt", text, _trial("megatron_gpt", 8, layout=_gpt()), MEG_WIN)
    assert r.status == TrialStatus.INVALID_LOG
    assert "1 logged iteration(s) longer than a day (86400000 ms/iter): iteration 70: 1e+308 ms" in r.reason


def test_megatron_one_tiny_line_among_twelve_is_invalid_not_8_percent_off():
    """Before: one 1e-300 ms line was OK and moved the mean 8 %."""
    text = W.megatron(ITS, {**{i: 464.1 for i in ITS}, 70: 1e-300}, gbs=8)
    r = _run("megatron_gpt", text, _trial("megatron_gpt", 8, layout=_gpt()), MEG_WIN)
    assert r.status == TrialStatus.INVALID_LOG
    assert "below the plausible floor" in r.reason and "iteration 70: 1e-300 ms" in r.reason


def test_megatron_flop_floor_uses_the_model_and_names_the_bound():
    # GPT 24 x 1024, seq 1024, global batch 8 on 1 GPU: 72*8*1024*24*1024^2*(1+1024/6144) FLOPs at
    # 20 PFLOP/s = 0.8657 ms; a 0.5 ms iteration is faster than any GPU, 1.5 ms (above the catalog's 1 ms) too
    f = get("megatron_gpt")
    t = _trial("megatron_gpt", 8, layout=_gpt())
    assert f.latency_floor_ms(t.cell) == pytest.approx(0.8657, rel=1e-3)
    big = _trial("megatron_gpt", 8, layout=_gpt(hidden=8192, layers=80, gbs=512))
    floor = f.latency_floor_ms(big.cell)  # a 70B-class model, 512 x 1024 tokens on one GPU: ~10.3 s
    assert 10000 < floor < 11000
    r = _run("megatron_gpt", W.megatron(ITS, floor / 2, gbs=512), big, MEG_WIN)
    assert r.status == TrialStatus.INVALID_LOG
    assert "FLOP count for one iteration at a per-GPU peak above any GPU's" in r.reason
    ok = _run("megatron_gpt", W.megatron(ITS, floor * 3, gbs=512), big, MEG_WIN)
    assert ok.status == TrialStatus.OK, ok.reason


def test_megatron_floor_from_the_arguments_block_when_the_cell_does_not_state_the_model():
    lay = ParallelLayout(group="DP", case="DP_1x1x1_512", dp=1, mp=1, pp=1, micro_batch=4, global_batch=512,
                         hidden_size=0, num_heads=0, num_layers=0, seq_length=1024)
    t = _trial("megatron_gpt", 4, layout=lay)
    args = {"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "seq_length": 1024,
            "global_batch_size": 512, "micro_batch_size": 4}
    r = _run("megatron_gpt", W.megatron(ITS, 100.0, gbs=512, args=args), t, MEG_WIN)
    assert r.status == TrialStatus.INVALID_LOG and "per-GPU peak above any GPU's" in r.reason
    assert "the cell's" not in r.reason  # no false "the cell's is 0" for facts the file name left out
    ok = _run("megatron_gpt", W.megatron(ITS, 40000.0, gbs=512, args=args), t, MEG_WIN)
    assert ok.status == TrialStatus.OK, ok.reason


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -3.0])
def test_rn50_non_finite_zero_or_negative_speed_is_invalid(value):
    text = W.rn50(120, 400.0).replace("Batch[50]\tSpeed: 400.00", f"Batch[50]\tSpeed: {value}")
    r = _run("mxnet_resnet50", text, _trial("mxnet_resnet50", 128), Window(20, 100))
    assert r.status == TrialStatus.INVALID_LOG
    assert "batch 50" in r.reason or "iteration 50" in r.reason


def test_rn50_line_above_the_per_gpu_ceiling_is_invalid():
    text = W.rn50(120, 400.0).replace("Batch[50]\tSpeed: 400.00", "Batch[50]\tSpeed: 1e12")
    r = _run("mxnet_resnet50", text, _trial("mxnet_resnet50", 128), Window(20, 100))
    assert r.status == TrialStatus.INVALID_LOG
    assert "above the plausible maximum 30000 samples/s (30000 per GPU x 1 GPUs" in r.reason


def test_throughput_so_low_that_a_batch_takes_a_day_is_invalid():
    m = TrialMetric(value=1e-300)
    why = plausibility_problem(m, 8, 30000.0, global_batch=1024)
    assert why and "longer than a day (86400 s)" in why
    assert plausibility_problem(TrialMetric(value=2555.2), 8, 30000.0, global_batch=1024) is None


def test_latency_metric_longer_than_a_day_is_invalid():
    why = plausibility_problem(TrialMetric(value=8.3e306, kind=MetricKind.LATENCY), 1, 1.0)
    assert why and f"longer than a day ({DAY_MS:.0f} ms/iter)" in why


def test_mxnet_bert_latency_faster_than_the_ceiling_is_invalid():
    text = W.mxnet_bert(120, 1, 250.0)
    ok = _run("mxnet_bert", text, _trial("mxnet_bert", 32), Window(20, 100))
    assert ok.status == TrialStatus.OK, ok.reason
    bad = _run("mxnet_bert", text.replace("latency=250.0 ms/batch", "latency=0.001 ms/batch", 1),
               _trial("mxnet_bert", 32), Window(20, 100))
    assert bad.status == TrialStatus.INVALID_LOG
    assert "below the plausible floor 1.6 ms/iter (32 samples per GPU at the catalog's" in bad.reason
