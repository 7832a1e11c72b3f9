"""LLM figures, run checks and reference bands (measure/llm_metrics.py, measure/llm_checks.py), on the
genuine excerpts of tests/data/genuine_logs/llm and on published figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf_tasks.core.model import ParsedLog, Sample, Window
from dlperf_tasks.frameworks import _megatron_llm_log as megatron
from dlperf_tasks.frameworks import _nemo2_log as nemo2
from dlperf_tasks.frameworks import _torchtitan_log as titan
from dlperf_tasks.measure import llm_checks, llm_metrics

LLM = Path(__file__).resolve().parents[1] / "data" / "genuine_logs" / "llm"


def _lines(name):
    return (LLM / name).read_text().splitlines(True)


def test_flops_per_token_both_conventions_llama3_8b():
    assert llm_metrics.flops_per_token("llama3-8b", 8192, "full") == pytest.approx(5.791e10, rel=1e-3)
    assert llm_metrics.flops_per_token("llama3-8b", 8192, "megatron_bridge") == pytest.approx(5.147e10, rel=1e-3)
    # Megatron-Bridge 25.11, DGX-H100, Llama3 8B FP8: 14,451 tokens/s/GPU printed as 744 TFLOP/s/GPU
    assert 14451 * llm_metrics.flops_per_token("llama3-8b", 8192, "megatron_bridge") / 1e12 == pytest.approx(744, abs=0.5)
    with pytest.raises(ValueError, match="unknown FLOPs convention"):
        llm_metrics.flops_per_token("llama3-8b", 8192, "guess")


def test_megatron_tokens_tflops_energy_from_the_2026_log():
    p = megatron.parse_lines(_lines("megatron_2026_cloudai.log"))
    cell = {"model": "llama3-8b", "gpu": "H100-SXM", "precision": "bf16", "seq_length": 8192, "world_size": 8}
    f = llm_metrics.llm_figures(p, "megatron_bridge", cell, Window(warmup=291, measure=3))
    ms = (3075.7 + 3037.2 + 3035.2) / 3
    assert f["step_time_ms"]["value"] == pytest.approx(ms)
    tps = 32 * 8192 / (ms / 1000) / 8  # the log's global batch 32
    assert f["tokens_per_sec_per_gpu"]["value"] == pytest.approx(tps)
    tf = f["tflops_per_gpu"]
    assert tf["conventions"]["megatron_bridge"] == pytest.approx(tps * 5.147e10 / 1e12, rel=1e-3)
    assert tf["upstream"]["value"] == pytest.approx((478.0 + 484.0 + 484.3) / 3)
    assert tf["upstream"]["mismatch"] is True  # that run was not Llama-3-8B at seq 8192: the mismatch shows
    assert f["energy_j_per_token"]["value"] == pytest.approx((1992.5 + 1982.6 + 1980.1) / 3 / (32 * 8192 / 8))
    assert f["mfu_pct"]["peak_tflops"] == 989.5


def test_missing_fact_is_refused_not_guessed():
    p = nemo2.parse_lines(_lines("nemo2_tflops.log"))
    f = llm_metrics.llm_figures(p, "nemo2", {"model": "llama3-8b", "gpu": "H100-SXM", "precision": "bf16"},
                                Window(warmup=73, measure=3))
    assert f["tokens_per_sec_per_gpu"]["value"] is None
    assert "sequence length" in f["tokens_per_sec_per_gpu"]["reason"]
    assert "world size" in f["tokens_per_sec_per_gpu"]["reason"]
    assert f["mfu_pct"]["value"] is None and f["step_time_ms"]["value"] == pytest.approx(8757.333, rel=1e-4)


def test_one_step_or_warmup_only_gives_no_figure():
    p = titan.parse_lines(_lines("torchtitan_pr1287.log"))
    cell = {"model": "llama3.1-8b", "gpu": "H100-SXM", "precision": "bf16", "seq_length": 8192, "world_size": 8}
    f = llm_metrics.llm_figures(p, "torchtitan", cell, Window(warmup=245, measure=10))
    assert f["tokens_per_sec_per_gpu"]["value"] is None and "1 logged step" in f["tokens_per_sec_per_gpu"]["reason"]
    g = llm_metrics.llm_figures(p, "torchtitan", cell, Window(warmup=300, measure=10))
    assert "0 logged step" in g["mfu_pct"]["reason"]


def test_torchtitan_tps_kept_mfu_ours_vs_printed():
    p = titan.parse_lines(_lines("torchtitan_pr1287.log"))
    cell = {"model": "llama3.1-8b", "gpu": "H100-SXM", "precision": "bf16", "seq_length": 8192, "world_size": 8,
            "global_batch": 16}
    f = llm_metrics.llm_figures(p, "torchtitan", cell, Window(warmup=200, measure=50))
    tps = (5593 + 5868 + 5869 + 5864 + 5862) / 5
    assert f["tokens_per_sec_per_gpu"]["value"] == pytest.approx(tps)
    assert f["tflops_per_gpu"]["value"] == pytest.approx(tps * 5.791e10 / 1e12, rel=1e-3)
    # torchtitan's own tflops for this run agree with the full convention within 1 %
    assert f["tflops_per_gpu"]["upstream"]["convention"] == "full"
    assert abs(f["tflops_per_gpu"]["upstream"]["diff_pct"]) < 1.0
    assert f["mfu_pct"]["value"] == pytest.approx(100 * tps * 5.791e10 / 1e12 / 989.5, rel=1e-3)


@pytest.mark.parametrize("gpu, vendor, precision, words", [
    ("RTX 4090", "NVIDIA", "bf16", "not in the peak table"),
    ("MI300X", "AMD", "bf16", "not NVIDIA"),
    ("B300", "NVIDIA", "nvfp4", "no stated dense FP4 peak"),
    ("A100", "NVIDIA", "fp8", "no stated dense FP8 peak"),
])
def test_mfu_refused_with_reason_tokens_kept(gpu, vendor, precision, words):
    p = titan.parse_lines(_lines("torchtitan_pr3393.log"))
    cell = {"model": "llama3.1-8b", "gpu": gpu, "vendor": vendor, "precision": precision, "seq_length": 8192,
            "world_size": 8}
    f = llm_metrics.llm_figures(p, "torchtitan", cell, Window(warmup=13, measure=8))
    assert f["mfu_pct"]["value"] is None and words in f["mfu_pct"]["reason"]
    assert f["tokens_per_sec_per_gpu"]["value"] > 7000


def _steps(values, loss=None):
    return ParsedLog(samples=[Sample(iteration=i + 1, value=v, unit="tokens/s/gpu", loss=loss) for i, v in
                              enumerate(values)])


def test_mfu_above_100_is_invalid():
    cell = {"model": "llama3-8b", "gpu": "A100", "precision": "bf16", "seq_length": 8192, "world_size": 8}
    f = llm_metrics.llm_figures(_steps([9000.0] * 4), "torchtitan", cell, Window(warmup=1, measure=3))
    assert f["mfu_pct"]["value"] is None and f["mfu_pct"]["invalid"] is True
    assert "above 100 %" in f["mfu_pct"]["reason"]


def test_fp8_run_bf16_mfu_not_shown_as_fp8_and_blackwell_peak_flagged():
    p = _steps([30000.0] * 4)
    p.extra["mfu_pct"] = {i: 175.6 for i in range(1, 5)}  # 1,737 TFLOP/s over H100's BF16 989
    cell = {"model": "llama3-8b", "gpu": "B200", "precision": "fp8", "seq_length": 8192, "world_size": 8}
    f = llm_metrics.llm_figures(p, "torchtitan", cell, Window(warmup=1, measure=3))
    m = f["mfu_pct"]
    assert m["peak_tflops"] == 4500 and m["value"] == pytest.approx(100 * 30000 * 5.791e10 / 1e12 / 4500, rel=1e-3)
    assert "not an FP8 MFU" in m["upstream"]["shown_as"]
    assert "recomputed" in m["upstream"]["flag"]


def test_run_checks_genuine_log_clean_and_broken_runs():
    p = titan.parse_lines(_lines("torchtitan_pr3393.log"))
    assert llm_checks.failed(llm_checks.run_checks(p, Window(warmup=13, measure=8))) == []
    reasons = llm_checks.failed(llm_checks.run_checks(p, Window(warmup=13, measure=20)))
    assert reasons == ["complete: incomplete run: last logged step 21 of 33"]
    empty = llm_checks.failed(llm_checks.run_checks(ParsedLog(), Window(warmup=1, measure=3)))
    assert "data: no step record in the log" in empty
    drift = _steps([100.0, 100.0, 80.0, 80.0])
    assert any(r.startswith("drift:") for r in llm_checks.failed(llm_checks.run_checks(drift, Window(0, 4))))


def test_run_checks_loss_grad_skipped():
    bad = titan.parse_lines(["step: 1  loss:  3.0  grad_norm:  1.0  memory: 1.00GiB(1.00%)  tps: 100  mfu: 1.00%\n",
                             "step: 2  loss:  9.0  grad_norm:  inf  memory: 1.00GiB(1.00%)  tps: 100  mfu: 1.00%\n"])
    reasons = " | ".join(llm_checks.failed(llm_checks.run_checks(bad, Window(warmup=0, measure=2))))
    assert "exploding loss (step 2: loss 9" in reasons and "non-finite grad norm at step 2" in reasons
    skipped = _steps([1.0, 1.0, 1.0])
    skipped.extra["skipped_iterations"] = {2: 1}
    assert "skipped: 1 skipped iteration(s) inside the window" in " ".join(
        llm_checks.failed(llm_checks.run_checks(skipped, Window(warmup=0, measure=3))))


def test_reference_band_matches_exactly_and_borrows_none():
    cell = {"framework": "megatron_bridge", "model": "llama3-8b", "precision": "fp8", "gpu": "H100-SXM",
            "world_size": 8, "layout": {"global_batch": 128, "micro_batch": 1, "seq_length": 8192, "fsdp": 8,
                                        "tp": 1, "pp": 1, "cp": 1}}
    tps = 14451 * 0.98
    figures = {"tokens_per_sec_per_gpu": {"value": tps},
               "tflops_per_gpu": {"value": 1.0, "conventions": {
                   "megatron_bridge": tps * llm_metrics.flops_per_token("llama3-8b", 8192, "megatron_bridge") / 1e12}}}
    band = llm_checks.reference_band(cell, figures)
    assert band["source"].startswith("NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a:")
    assert band["container"] == "nvcr.io/nvidia/nemo:25.11" and band["tolerance_pct"] >= 2.5
    assert band["figures"]["tokens_per_sec_per_gpu"] == {"published": 14451, "measured": tps, "ratio": 0.98,
                                                         "inside": True}
    assert band["figures"]["tflops_per_gpu"]["ratio"] == pytest.approx(0.98, abs=0.002)
    other = dict(cell, precision="bf16")
    none = llm_checks.reference_band(other, figures)
    assert none["reference"] is None and "none borrowed" in none["reason"]
    assert llm_checks.reference_band(dict(cell, world_size=16), figures)["reference"] is None


def test_torchtitan_reference_shows_its_own_window():
    cell = {"framework": "torchtitan", "model": "llama3.1-8b", "precision": "bf16", "gpu": "H100-96GB",
            "world_size": 8, "layout": {"global_batch": 16, "micro_batch": 2, "fsdp": 8, "compile": True,
                                        "float8": False}}
    band = llm_checks.reference_band(cell, {"tokens_per_sec_per_gpu": {"value": 6400.0}})
    assert band["reference_window"] == "TPS logged every 10 steps, read at step 90"
    assert band["figures"]["tokens_per_sec_per_gpu"]["ratio"] == pytest.approx(6400 / 6667, abs=1e-4)
    assert band["figures"]["tokens_per_sec_per_gpu"]["inside"] is False  # 4 % below: outside +-2.5 %
    assert "torchtitan@b5bcd76c66d0acb1a08b176d9639425bc55e0b2a:benchmarks/" in band["source"]


def test_nemo2_tokens_ours_agree_with_the_printed_ones():
    """NeMo 2's own tokens_per_sec_per_gpu (genuine log: Llama-3-8B, global batch 128) against dlperf's
    global batch x seq / step time / world size with seq 8192 on 8 GPUs."""
    p = nemo2.parse_lines(_lines("nemo2_tokens.log"))
    cell = {"model": "llama3-8b", "gpu": "H100-SXM", "precision": "bf16", "seq_length": 8192, "world_size": 8}
    f = llm_metrics.llm_figures(p, "nemo2", cell, Window(warmup=96, measure=3))
    tok = f["tokens_per_sec_per_gpu"]
    assert tok["value"] == pytest.approx(128 * 8192 / ((12.22 + 12.21 + 12.21) / 3) / 8)
    assert tok["upstream"]["mismatch"] is False and abs(tok["upstream"]["diff_pct"]) < 0.2
    # a world size that is not the run's shows as a mismatch, never silently
    g = llm_metrics.llm_figures(p, "nemo2", dict(cell, world_size=16), Window(warmup=96, measure=3))
    assert g["tokens_per_sec_per_gpu"]["upstream"]["mismatch"] is True
