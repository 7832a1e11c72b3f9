"""Checks on an LLM pretraining run and the published reference band beside its result.

:func:`run_checks(parsed, window, total_steps=None)` -> list of ``{"check", "ok", "reason"}``: one
entry per check, in this order: ``parse`` (the parser refused no record), ``data`` (step records
exist), ``complete`` (the log reaches the window's last step, or ``total_steps``), ``loss`` (every
loss finite, none above :data:`EXPLODE_FACTOR` x the first logged loss), ``grad_norm`` (finite, none
above :data:`EXPLODE_FACTOR` x the window's median), ``skipped`` (no skipped or NaN iteration inside
the window), ``drift`` (the mean of the window's second half within :data:`DRIFT_PCT` of its first
half's). :func:`failed(checks)` lists the reasons of those that failed.

:func:`reference_band(cell, figures)` -> the published reference for the same framework, model,
precision, GPU, GPU count and layout (``data/llm_references.json``), with ratio = measured /
published and whether it lies inside ± the tolerance (at least :data:`MIN_TOLERANCE_PCT`), its
source (repository@commit:path) and its container; or ``{"reference": None, "reason": ...}``: a
cell without an exact match says so and borrows none.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import fmean, median
from typing import Mapping

from dlperf_tasks.core.model import ParsedLog, Window

_DATA = Path(__file__).resolve().parent / "data"
EXPLODE_FACTOR = 2.0
DRIFT_PCT = 5.0
MIN_TOLERANCE_PCT = 2.5


def _check(name: str, reason: str | None) -> dict:
    return {"check": name, "ok": reason is None, "reason": reason}


def run_checks(parsed: ParsedLog, window: Window, total_steps: int | None = None) -> list[dict]:
    """The run checks of one trial's log (see the module docstring)."""
    f = parsed.facts
    samples = list(parsed.samples)
    end = window.warmup + window.measure
    win = [s for s in samples if window.warmup < s.iteration <= end]
    out = [_check("parse", f"{len(f.errors)} record(s) refused, first: {f.errors[0]}" if f.errors else None)]
    out.append(_check("data", None if samples else "no step record in the log"))
    last = max((s.iteration for s in samples), default=0)
    need = total_steps or end
    out.append(_check("complete", None if last >= need else f"incomplete run: last logged step {last} of {need}"))
    losses = [(s.iteration, s.loss) for s in samples if s.loss is not None]
    bad = [f"step {i}: loss {v}" for i, v in losses if not math.isfinite(v)] + list(f.nonfinite_losses)
    first = next((v for _, v in losses if math.isfinite(v)), None)
    high = [f"step {i}: loss {v:g} > {EXPLODE_FACTOR:g} x the first ({first:g})" for i, v in losses
            if first and math.isfinite(v) and v > EXPLODE_FACTOR * first]
    out.append(_check("loss", f"non-finite loss ({bad[0]})" if bad else f"exploding loss ({high[0]})" if high else None))
    out.append(_check("grad_norm", _grad_reason(parsed, win)))
    out.append(_check("skipped", _skipped_reason(parsed, window)))
    out.append(_check("drift", _drift_reason(win)))
    return out


def _grad_reason(parsed: ParsedLog, win: list) -> str | None:
    nonfinite = parsed.extra.get("nonfinite_grad_norms") or []
    if nonfinite:
        return f"non-finite grad norm at step {nonfinite[0]}"
    steps = {s.iteration for s in win}
    norms = {i: v for i, v in (parsed.extra.get("grad_norm") or {}).items() if i in steps and v is not None}
    if len(norms) >= 3:
        mid = median(norms.values())
        for i, v in sorted(norms.items()):
            if mid > 0 and v > EXPLODE_FACTOR * 10 * mid:
                return f"exploding grad norm at step {i}: {v:g} vs the window's median {mid:g}"
    return None


def _skipped_reason(parsed: ParsedLog, window: Window) -> str | None:
    end = window.warmup + window.measure
    skipped = {i: n for i, n in (parsed.extra.get("skipped_iterations") or {}).items() if window.warmup < i <= end}
    if skipped:
        i = min(skipped)
        return f"{sum(skipped.values())} skipped iteration(s) inside the window (first reported at step {i})"
    if parsed.facts.nonfinite_losses:
        return f"NaN iterations: {parsed.facts.nonfinite_losses[0]}"
    return None


def _drift_reason(win: list) -> str | None:
    if len(win) < 4:
        return None
    half = len(win) // 2
    a, b = fmean(s.value for s in win[:half]), fmean(s.value for s in win[half:])
    if a > 0 and abs(b - a) / a * 100.0 > DRIFT_PCT:
        return (f"drift inside the window: second half mean {b:.6g} vs first half {a:.6g} "
                f"({100.0 * (b - a) / a:+.1f} %, limit {DRIFT_PCT:g} %)")
    return None


def failed(checks: list[dict]) -> list[str]:
    return [f"{c['check']}: {c['reason']}" for c in checks if not c["ok"]]


def references() -> list[dict]:
    with open(_DATA / "llm_references.json", encoding="utf-8") as fh:
        return json.load(fh)["references"]


def _matches(ref: dict, cell: Mapping) -> bool:
    for key in ("framework", "model", "precision", "gpu"):
        if str(cell.get(key, "")).lower() != str(ref[key]).lower():
            return False
    if cell.get("world_size") != ref["gpus"]:
        return False
    layout = cell.get("layout") or {}
    return all(layout.get(k) == v for k, v in ref.get("layout", {}).items())


def reference_band(cell: Mapping, figures: Mapping) -> dict:
    """The matching published reference and where this result lies against it."""
    found = [r for r in references() if _matches(r, cell)]
    if not found:
        return {"reference": None, "reason": (
            f"no published reference for {cell.get('framework')} {cell.get('model')} {cell.get('precision')} on "
            f"{cell.get('world_size')}x {cell.get('gpu')} with this layout (measure/data/llm_references.json); "
            "none borrowed")}
    ref = found[0]
    tol = max(float(ref.get("tolerance_pct", MIN_TOLERANCE_PCT)), MIN_TOLERANCE_PCT)
    out = {"reference": ref["id"], "source": ref["source"], "container": ref["container"], "tolerance_pct": tol,
           "reference_window": ref.get("window", "not stated"), "figures": {}}
    for name in ("tokens_per_sec_per_gpu", "tflops_per_gpu"):
        pub = ref.get(name)
        fig = figures.get(name) or {}
        mine = fig.get("value")
        if name == "tflops_per_gpu" and mine is not None and ref.get("flops_convention"):
            mine = (fig.get("conventions") or {}).get(ref["flops_convention"], mine)
        if pub is None:
            continue
        if mine is None:
            out["figures"][name] = {"published": pub, "measured": None, "reason": fig.get("reason", "not measured")}
            continue
        ratio = mine / pub
        out["figures"][name] = {"published": pub, "measured": mine, "ratio": round(ratio, 4),
                                "inside": abs(ratio - 1.0) * 100.0 <= tol}
    return out
