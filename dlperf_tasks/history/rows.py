"""Row builders shared by the CLI (``dlperf results``) and the results page (web/app.py):
one dict per table row, rendered as text/JSON/CSV (history/fmt.py) or HTML (templates/)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from dlperf_tasks.report.flags import NOISY_CV, flags_text
from dlperf_tasks.report.llm_summary import llm_row


def ls_rows(summaries: Iterable[Mapping[str, Any]], framework: str | None = None, model: str | None = None,
            status: str | None = None) -> list[dict]:
    """Index rows -> one row per run, newest first (filters as ``dlperf results ls``)."""
    rows = []
    for s in summaries:
        if framework and s.get("framework") != framework:
            continue
        cells = s.get("cells") or {}
        if model and not any((c or {}).get("model") == model for c in cells.values()):
            continue
        if status and str(s.get("status")) != status:
            continue
        n_valid = sum(int((c or {}).get("n_valid") or 0) for c in cells.values())
        rows.append({"run_id": s.get("run_id"), "suite": s.get("suite"), "date": s.get("date"),
                     "started_at": s.get("started_at"), "status": s.get("status"), "cells": len(cells),
                     "valid_trials": n_valid, "findings": (s.get("regressions") or {}).get("findings"),
                     "framework": s.get("framework")})
    rows.sort(key=lambda r: (str(r["started_at"] or r["date"]), str(r["run_id"])), reverse=True)
    return rows


def is_noisy(cv: Any) -> bool:
    try:
        return cv is not None and float(cv) > NOISY_CV
    except (TypeError, ValueError):
        return False


def show_rows(result: Mapping[str, Any]) -> list[dict]:
    """A result JSON's cells -> one row per cell (``noisy``: CV above :data:`NOISY_CV`; ``flags``:
    report/flags.py's wording)."""
    rows = []
    for c in result.get("cells", []):
        rows.append({"cell_id": c.get("cell_id"), "model": c.get("model"), "topology": c.get("topology"),
                     "bz": c.get("batch_size_per_device"), "precision": c.get("precision"),
                     "median": c.get("median_speed"), "average": c.get("average_speed"),
                     "min": c.get("min"), "max": c.get("max"),
                     "speedup": c.get("speedup"), "valid": c.get("n_valid"), "invalid": c.get("n_invalid"),
                     "cv": c.get("cv"), "noisy": is_noisy(c.get("cv")), "unit": c.get("unit"),
                     "flags": flags_text(c), "llm": llm_row(c),
                     "invalid_reasons": sorted({t.get("reason") or t.get("status") for t in c.get("trials") or []
                                                if t.get("status") != "OK" and (t.get("reason") or t.get("status"))})})
    return rows


def compare_rows(doc: Mapping[str, Any]) -> list[dict]:
    """A :func:`dlperf_tasks.history.compare.compare_runs` doc -> one row per cell."""
    return [{"cell_id": c["cell_id"], "median_a": c["median_a"], "median_b": c["median_b"],
             "n_a": c["n_a"], "n_b": c["n_b"], "delta_pct": c["delta_pct"],
             "ci_pct": None if c["ci_pct"] is None else f"[{c['ci_pct'][0]:+.2f}, {c['ci_pct'][1]:+.2f}]",
             "mde_pct": c["mde_pct"], "floor_pct": c.get("floor_pct"), "speedup_a": c["speedup_a"],
             "speedup_b": c["speedup_b"], "verdict": c["verdict"], "noise": c["noise_source"],
             "reason": c.get("reason") or ""}
            for c in doc["cells"]]


def verdict_note(doc: Mapping[str, Any]) -> str:
    """One plain sentence about what the comparison could and could not decide."""
    counts = doc.get("verdicts") or {}
    if doc.get("same_run"):
        return f"A and B are the same run ({doc.get('run_a')}): nothing to compare"
    und = counts.get("undecided", 0) + counts.get("n/a", 0)
    parts = [f"{n} {v}" for v, n in sorted(counts.items())]
    text = "verdicts: " + (", ".join(parts) or "none")
    if und:
        mdes = [c["mde_pct"] for c in doc["cells"] if c.get("verdict") == "undecided" and c.get("mde_pct")]
        text += (f"; {und} cell(s) cannot be decided with these trial counts"
                 + (f" (they detect changes of {min(mdes):.1f}% or more)" if mdes else "")
                 + ": run more trials")
    if counts.get("within_noise"):
        text += (f"; {counts['within_noise']} cell(s) changed less than two runs of the same code do on this "
                 "machine (the noise floor): not called faster or slower")
    if not doc.get("same_machine", True):
        text += "; A and B ran on different machines (see the environment diff)"
    return text
