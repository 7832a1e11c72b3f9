"""A cell's LLM figures over its valid trials, for result.json, report.md and every surface that
shows a cell (the flags wording is :func:`llm_flags`).

Per valid trial the gate put ``metric.details["llm"]`` (``measure/llm_result.py``). The cell gets
the median of each figure over its valid trials (tokens/s/GPU, step time, TFLOP/s/GPU in both
attention conventions, MFU with the peak used or the reason it is refused, peak memory, energy per
token), the union of failed run checks, and the reference band of the trial nearest the median.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

FIGURES = ("tokens_per_sec_per_gpu", "step_time_ms", "tflops_per_gpu", "mfu_pct", "energy_j_per_token")


def _llm(t: Any) -> Mapping[str, Any] | None:
    m = getattr(t, "metric", None)
    d = (getattr(m, "details", None) or {}).get("llm") if m is not None else None
    return d if isinstance(d, Mapping) and "figures" in d else None


def cell_llm(trials: Iterable[Any]) -> dict[str, Any] | None:
    """The cell's ``llm`` entry (None when no valid trial carries LLM figures)."""
    docs = [d for t in trials if getattr(t, "valid", False) for d in [_llm(t)] if d is not None]
    if not docs:
        return None
    out: dict[str, Any] = {"n_trials": len(docs), "figures": {}}
    for name in FIGURES:
        figs = [d["figures"].get(name) or {} for d in docs]
        values = [f["value"] for f in figs if isinstance(f.get("value"), (int, float))]
        if values:
            entry: dict[str, Any] = {"median": statistics.median(values), "unit": figs[0].get("unit"),
                                     "how": figs[0].get("how")}
            conv = [f.get("conventions") for f in figs if isinstance(f.get("conventions"), Mapping)]
            if conv:
                entry["conventions"] = {k: statistics.median(c[k] for c in conv if isinstance(c.get(k), (int, float)))
                                        for k in conv[0] if any(isinstance(c.get(k), (int, float)) for c in conv)}
            for key in ("peak_tflops", "peak_source", "upstream", "convention"):
                if key in figs[0]:
                    entry[key] = figs[0][key]
            out["figures"][name] = entry
        else:
            out["figures"][name] = {"median": None, "reason": next((f.get("reason") for f in figs if f.get("reason")),
                                                                   "not in the log")}
    tps = [(d["figures"].get("tokens_per_sec_per_gpu") or {}).get("value") for d in docs]
    mid = out["figures"]["tokens_per_sec_per_gpu"].get("median")
    pick = min(range(len(docs)), key=lambda i: abs((tps[i] or 0) - (mid or 0)))
    out["reference"] = docs[pick].get("reference")
    out["failed_checks"] = sorted({c["check"] + ": " + str(c.get("reason")) for d in docs
                                   for c in d.get("checks") or [] if not c.get("ok")})
    return out


def llm_flags(c: Mapping[str, Any]) -> list[str]:
    """The LLM flags of a cell: failed run checks, a reference outside its band, a TFLOP/s mismatch
    (the interconnect probe's flags: report/probe_summary.py)."""
    llm = c.get("llm")
    out: list[str] = []
    if not isinstance(llm, Mapping):
        return out
    out += [f"run check {x}" for x in llm.get("failed_checks") or []]
    ref = llm.get("reference") or {}
    for name, band in (ref.get("figures") or {}).items():
        if isinstance(band, Mapping) and band.get("inside") is False:
            out.append(f"{name} {band.get('ratio')} x the published {band.get('published')} ({ref.get('reference')}, "
                       f"band +-{ref.get('tolerance_pct')}%)")
    up = ((llm.get("figures") or {}).get("tflops_per_gpu") or {}).get("upstream") or {}
    if up.get("mismatch"):
        out.append(f"TFLOP/s/GPU printed by the framework differs by {up.get('diff_pct')}% from dlperf's "
                   f"({up.get('convention')} convention)")
    return out


def _num(v: Any, fmt: str = "{:,.1f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "n/a"


LLM_COLUMNS = ("tokens/s/GPU", "step ms", "TFLOP/s/GPU (full / causal-halved)", "MFU", "reference")


def llm_row(c: Mapping[str, Any]) -> list[str] | None:
    """A cell's LLM figures as display texts (:data:`LLM_COLUMNS`), None when it has none."""
    llm = c.get("llm")
    if not isinstance(llm, Mapping):
        return None
    f = llm.get("figures") or {}
    tf = f.get("tflops_per_gpu") or {}
    conv = tf.get("conventions") or {}
    mfu = f.get("mfu_pct") or {}
    ref = llm.get("reference") or {}
    ref_text = (f"{ref.get('reference')} ({ref.get('source')})" if ref.get("reference")
                else "none: " + str(ref.get("reason", "no reference")).split(";")[0])
    mfu_text = (f"{mfu['median']:.1f}% of {_num(mfu.get('peak_tflops'), '{:,.0f}')} TFLOP/s"
                if isinstance(mfu.get("median"), (int, float)) else f"refused: {mfu.get('reason', 'n/a')}")
    return [_num((f.get("tokens_per_sec_per_gpu") or {}).get("median")), _num((f.get("step_time_ms") or {}).get("median")),
            f"{_num(conv.get('full', tf.get('median')))} / {_num(conv.get('megatron_bridge'))}", mfu_text, ref_text]


def llm_table(cells: list[Mapping[str, Any]]) -> list[str]:
    """report.md's "LLM figures" section (empty list when no cell has them)."""
    rows = [(c.get("cell_id"), r) for c in cells for r in [llm_row(c)] if r is not None]
    if not rows:
        return []
    out = ["## LLM figures (median of valid trials)", "", "| cell | " + " | ".join(LLM_COLUMNS) + " |",
           "|" + " --- |" * (len(LLM_COLUMNS) + 1)]
    out += [f"| {cid} | " + " | ".join(r) + " |" for cid, r in rows]
    return out + [""]
