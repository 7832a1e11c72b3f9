"""LLM pretraining figures with stated denominators: tokens/s/GPU, TFLOP/s/GPU, MFU, step time,
peak memory, energy per token, over a declared steady-state window.

Entry point: :func:`llm_figures(parsed, framework, cell, window)` -> dict. ``parsed`` is a
``ParsedLog`` from one of the LLM log parsers (``frameworks/_megatron_llm_log``, ``_nemo2_log``,
``_torchtitan_log``); ``framework`` is ``"megatron_bridge"``, ``"megatron_lm"``, ``"nemo2"`` or
``"torchtitan"``; ``cell`` is a plain mapping of what the cell states: ``model`` (a key of
``data/llm_models.json``), ``gpu`` (a key or alias of ``data/gpu_peaks.json``, or the name
nvidia-smi prints, "NVIDIA H100 80GB HBM3"; ``gpu_reason``: why there is none), ``vendor``
(default NVIDIA), ``precision`` (fp32/fp16/amp/bf16/fp8/mxfp8/nvfp4), ``global_batch``,
``seq_length``, ``world_size``. A fact the log prints (global batch) wins over the cell; a fact
neither gives refuses the figure it needs, with the reason (``{"value": None, "reason": ...}``);
nothing is guessed.

Every figure is ``{"value": x, "unit": ..., "how": ...}`` or ``{"value": None, "reason": ...}``.

Formulas:

* tokens/s per GPU = global batch x sequence length / step time / world size. torchtitan prints
  ``tps``, already per device: that is used as printed.
* FLOPs per token (training = 3 x forward) = 6 x N + attention, N = the matmul weights (every
  layer's q, k, v, o and the three MLP projections, plus the output head; no input embedding,
  no norms). Attention (QK^T and AV): 12 x layers x hidden x seq in the **full** convention
  (torchtitan, NeMo 2: the causal mask is not discounted) and half that, 6 x layers x hidden x
  seq, in the **megatron_bridge** convention (causal attention term halved). Llama-3-8B at seq
  8192: 5.791e10 (full) vs 5.147e10 (megatron_bridge).
* A printed tokens/s per GPU (NeMo 2's ``tokens_per_sec_per_gpu``) is shown beside dlperf's as ``upstream``, a
  difference beyond 1 % flagged.
* TFLOP/s per GPU = FLOPs per token x tokens/s per GPU / 1e12, shown in both conventions; the
  framework's own printed figure is compared with dlperf's in the framework's convention and a
  difference beyond 1 % is flagged.
* MFU = TFLOP/s per GPU (full convention) / the dense peak of the exact GPU at the compute
  precision (``data/gpu_peaks.json``; mxfp8 uses the FP8 rate, nvfp4 the FP4 rate, fp32 the FP32
  one, amp/fp16 the FP16 one). Unknown GPU, non-NVIDIA device, precision without a stated peak:
  refused with the reason (tokens/s kept). Above 100 %: invalid.
* Steady state: the steps with ``warmup < step <= warmup + measure``; fewer than two logged steps
  there (one step, or all in the warm-up) gives no figure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import fmean
from typing import Mapping

from dlperf_tasks.core.model import ParsedLog, Window

_DATA = Path(__file__).resolve().parent / "data"
#: framework -> the attention convention of the TFLOP/s figure it prints
CONVENTION = {"megatron_bridge": "megatron_bridge", "megatron_lm": "megatron_bridge", "nemo2": "full",
              "torchtitan": "full"}
CONVENTIONS = {"full": "attention 12*L*h*s per token (causal mask not discounted: torchtitan, NeMo 2)",
               "megatron_bridge": "attention 6*L*h*s per token (causal half: Megatron-Bridge)"}
#: the peak column each precision is judged against
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "amp": "fp16", "bf16": "bf16", "fp8": "fp8",
            "mxfp8": "fp8", "nvfp4": "fp4"}
MISMATCH_PCT = 1.0
BLACKWELL = ("B200", "B300", "GB200", "GB300")


def _load(name: str) -> dict:
    with open(_DATA / name, encoding="utf-8") as fh:
        return json.load(fh)


def gpu_table() -> dict:
    return _load("gpu_peaks.json")["gpus"]


def model_table() -> dict:
    return _load("llm_models.json")["models"]


def refused(reason: str) -> dict:
    return {"value": None, "reason": reason}


def flops_per_token(model: str, seq: int, convention: str) -> float:
    """Training FLOPs per token of ``model`` at sequence length ``seq`` (see the module docstring)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown FLOPs convention {convention!r}; known: {', '.join(CONVENTIONS)}")
    shape = model_table().get(model)
    if shape is None:
        raise KeyError(f"model {model!r} has no shape in measure/data/llm_models.json")
    L, h, f = shape["layers"], shape["hidden"], shape["ffn"]
    kv = h * shape["kv_heads"] // shape["heads"]
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * f
    n = L * per_layer + h * shape["vocab"]
    attention = 12.0 * L * h * seq * (0.5 if convention == "megatron_bridge" else 1.0)
    return 6.0 * n + attention


def resolve_gpu(name: str | None, vendor: str | None = "NVIDIA") -> tuple[str | None, str | None]:
    """(table key, None) for a GPU model name or alias, else (None, the reason)."""
    if vendor and vendor.upper() != "NVIDIA":
        return None, f"device vendor {vendor} is not NVIDIA: the peak table holds NVIDIA GPUs only"
    if not name:
        return None, "the cell names no GPU model"
    table = gpu_table()
    want = " ".join(name.split()).lower()
    # nvidia-smi's ``name`` (CUDA's device name) starts with the vendor: "NVIDIA A100-SXM4-80GB"
    wants = {want, want.removeprefix("nvidia ")}
    for key, row in table.items():
        if wants & {key.lower(), *(a.lower() for a in row.get("aliases", []))}:
            return key, None
    return None, f"GPU {name!r} is not in the peak table (measure/data/gpu_peaks.json: {', '.join(table)})"


def trial_gpu(models: Mapping[str, str | None]) -> tuple[str | None, str | None]:
    """The GPU model of a trial from what each of its nodes reported (nvidia-smi ``name``, env
    capture; ``{node: name or None}``): (the name, None), or (None, why there is none)."""
    seen = {n: " ".join(str(m).split()) for n, m in models.items() if m and str(m).strip() not in ("", "absent")}
    if not models:
        return None, "the trial recorded no nodes' GPU model (no environment capture)"
    if not seen:
        return None, "nvidia-smi reported no GPU model on the trial's nodes (environment capture: absent)"
    names = sorted(set(seen.values()))
    if len(names) > 1:
        return None, "the trial's nodes report different GPU models: " + ", ".join(
            f"{n}: {m}" for n, m in sorted(seen.items()))
    missing = sorted(n for n in models if n not in seen)
    if missing:
        return None, f"nvidia-smi reported no GPU model on node(s) {', '.join(missing)} (the others: {names[0]})"
    return names[0], None


def peak_tflops(gpu: str | None, precision: str, vendor: str | None = "NVIDIA",
                no_gpu_reason: str | None = None) -> tuple[float | None, str]:
    """(dense peak TFLOP/s, its source) or (None, why not); ``no_gpu_reason``: why ``gpu`` is None."""
    if not gpu and no_gpu_reason:
        return None, no_gpu_reason
    key, why = resolve_gpu(gpu, vendor)
    if key is None:
        return None, why or "no GPU"
    col = PEAK_KEY.get(precision)
    if col is None:
        return None, f"precision {precision!r} is not one of {', '.join(PEAK_KEY)}"
    row = gpu_table()[key]
    v = row["dense_tflops"].get(col)
    if v is None:
        return None, f"{key} has no stated dense {col.upper()} peak (measure/data/gpu_peaks.json)"
    return float(v), f"{key} dense {col.upper()} {v:g} TFLOP/s: {row['source']}"


def steady(parsed: ParsedLog, window: Window) -> list:
    """The samples inside the window (``warmup < step <= warmup + measure``)."""
    return [s for s in parsed.samples if window.warmup < s.iteration <= window.warmup + window.measure]


def _in(series: Mapping, steps: list[int]) -> list[float]:
    return [series[i] for i in steps if series.get(i) is not None]


def llm_figures(parsed: ParsedLog, framework: str, cell: Mapping, window: Window) -> dict:
    """All figures of one trial (see the module docstring)."""
    if framework not in CONVENTION:
        raise ValueError(f"unknown LLM framework {framework!r}; known: {', '.join(CONVENTION)}")
    out: dict = {"window": {"warmup": window.warmup, "measure": window.measure, "rule": "dlperf: "
                            "mean over the logged steps with warmup < step <= warmup+measure"}}
    win = steady(parsed, window)
    if len(win) < 2:
        why = (f"{len(win)} logged step(s) inside the window {window.warmup + 1}..{window.warmup + window.measure} "
               f"({len(parsed.samples)} in the log): no steady-state figure")
        for name in ("step_time_ms", "tokens_per_sec_per_gpu", "tflops_per_gpu", "mfu_pct", "energy_j_per_token"):
            out[name] = refused(why)
        return out
    steps = [s.iteration for s in win]
    world = cell.get("world_size")
    seq = cell.get("seq_length")
    gbs = parsed.extra.get("global_batch_size") or cell.get("global_batch")
    tokens_per_step = gbs * seq if gbs and seq else None
    if framework == "torchtitan":
        tps = fmean(s.value for s in win)
        out["tokens_per_sec_per_gpu"] = {"value": tps, "unit": "tokens/s/GPU", "how": "torchtitan's tps (per device), "
                                         f"mean of {len(win)} steps"}
        out["step_time_ms"] = ({"value": 1000.0 * tokens_per_step / world / tps, "unit": "ms",
                                "how": "derived: global batch x seq / world / tps"} if tokens_per_step and world
                               else refused("torchtitan prints no step time and the cell gives no global batch, "
                                            "sequence length and world size to derive it"))
    else:
        ms = fmean(s.value for s in win)
        out["step_time_ms"] = {"value": ms, "unit": "ms", "how": f"mean of {len(win)} logged steps"}
        missing = [n for n, v in (("global batch", gbs), ("sequence length", seq), ("world size", world)) if not v]
        if missing or not tokens_per_step or not world:
            out["tokens_per_sec_per_gpu"] = refused(f"neither the log nor the cell gives the {', '.join(missing)}")
        else:
            out["tokens_per_sec_per_gpu"] = {"value": tokens_per_step / (ms / 1000.0) / world, "unit": "tokens/s/GPU",
                                             "how": "global batch x seq / step time / world size"}
    printed = _in(parsed.extra.get("tokens_per_sec_per_gpu") or {}, steps)
    mine = out["tokens_per_sec_per_gpu"].get("value")
    if printed and mine:
        up = fmean(printed)
        diff = 100.0 * (up - mine) / mine
        out["tokens_per_sec_per_gpu"]["upstream"] = {"value": up, "diff_pct": round(diff, 2),
                                                     "mismatch": abs(diff) > MISMATCH_PCT}
    _flops(out, parsed, framework, cell, steps)
    _memory_energy(out, parsed, steps, tokens_per_step, world, cell)
    return out


def _flops(out: dict, parsed: ParsedLog, framework: str, cell: Mapping, steps: list[int]) -> None:
    tps = out["tokens_per_sec_per_gpu"].get("value")
    model, seq = cell.get("model"), cell.get("seq_length")
    if tps is None:
        out["tflops_per_gpu"] = refused("no tokens/s per GPU: " + out["tokens_per_sec_per_gpu"]["reason"])
    elif not isinstance(model, str) or model not in model_table() or not seq:
        out["tflops_per_gpu"] = refused(f"model {model!r} has no shape in measure/data/llm_models.json"
                                        if model not in model_table() else "the cell gives no sequence length")
    else:
        both = {c: flops_per_token(model, seq, c) * tps / 1e12 for c in CONVENTIONS}
        own = CONVENTION[framework]
        fig = {"value": both["full"], "unit": "TFLOP/s/GPU", "convention": "full", "conventions": both,
               "about": CONVENTIONS}
        printed = _in(parsed.extra.get("tflops_per_gpu") or {}, steps)
        if printed:
            up = fmean(printed)
            diff = 100.0 * (up - both[own]) / both[own]
            fig["upstream"] = {"value": up, "convention": own, "diff_pct": round(diff, 2),
                               "mismatch": abs(diff) > MISMATCH_PCT}
        out["tflops_per_gpu"] = fig
    _mfu(out, parsed, cell, steps)


def _mfu(out: dict, parsed: ParsedLog, cell: Mapping, steps: list[int]) -> None:
    prec = cell.get("precision") or ""
    peak, source = peak_tflops(cell.get("gpu"), prec, cell.get("vendor", "NVIDIA"), cell.get("gpu_reason"))
    tf = out["tflops_per_gpu"].get("value")
    if tf is None:
        out["mfu_pct"] = refused("no TFLOP/s per GPU: " + out["tflops_per_gpu"]["reason"])
    elif peak is None:
        out["mfu_pct"] = refused(source)
    else:
        v = 100.0 * tf / peak
        out["mfu_pct"] = {"value": v, "unit": "%", "peak_tflops": peak, "peak_source": source, "precision": prec}
        if v > 100.0:
            out["mfu_pct"].update(value=None, invalid=True,
                                  reason=f"MFU {v:.1f} % is above 100 % of the {peak:g} TFLOP/s peak: invalid")
    printed = _in(parsed.extra.get("mfu_pct") or {}, steps)
    if printed and out["mfu_pct"].get("value") is not None:
        up = fmean(printed)
        note = {"value": up, "shown_as": "upstream mfu (its own peak)"}
        if prec in ("fp8", "mxfp8", "nvfp4"):
            note["shown_as"] = "upstream mfu against a BF16 peak: not an FP8 MFU"
        implied = tf / (up / 100.0) if up > 0 else None
        key, _ = resolve_gpu(cell.get("gpu"), cell.get("vendor", "NVIDIA"))
        if key in BLACKWELL and implied is not None and peak and abs(implied - peak) / peak > 0.05:
            bf16 = gpu_table()[key]["dense_tflops"].get("bf16")
            if not bf16 or abs(implied - bf16) / bf16 > 0.05:
                note["flag"] = (f"the log's mfu implies a {implied:.0f} TFLOP/s peak, not {key}'s: "
                                "recomputed with the right peak")
        out["mfu_pct"]["upstream"] = note


def _memory_energy(out: dict, parsed: ParsedLog, steps: list[int], tokens_per_step, world, cell: Mapping) -> None:
    mem = [s.memory_mib for s in parsed.samples if s.memory_mib is not None]
    reserved = (parsed.extra.get("memory_mb") or {}).get("max_reserved") or parsed.extra.get("memory_mib")
    if mem or reserved:
        out["peak_memory_mib"] = {"value": max(mem) if mem else reserved, "unit": "MiB",
                                  "how": "allocator max reserved as the log prints it"}
    else:
        out["peak_memory_mib"] = refused("the log prints no allocator memory")
    if cell.get("smi_peak_mib") is not None:
        out["peak_memory_smi_mib"] = {"value": cell["smi_peak_mib"], "unit": "MiB", "how": "nvidia-smi, sampled"}
    energy = _in(parsed.extra.get("energy_j_per_gpu") or {}, steps)
    if not energy:
        out["energy_j_per_token"] = refused("no power was sampled (the log has no energy per GPU field)")
    elif not (tokens_per_step and world):
        out["energy_j_per_token"] = refused("no tokens per step (global batch x seq) to divide the energy by")
    else:
        e = fmean(energy) / (tokens_per_step / world)
        out["energy_j_per_token"] = ({"value": e, "unit": "J/token/GPU", "how": "energy per GPU per iteration / "
                                      "tokens per GPU per iteration"} if math.isfinite(e) else refused("non-finite"))
