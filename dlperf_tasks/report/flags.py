"""Flags a reader must see beside a cell's numbers: a noisy cell (CV of its valid
trials above the bound, :data:`NOISY_CV`), a superlinear speedup
(more than the cell's GPU count) or a scaling efficiency above 1, and an unsteady measurement
window (speed still trending in some trials, dlperf_tasks/measure/steady.py), a cell with no
valid trial, and the interconnect probe's flags with a slow multi-node cell's attribution
(report/probe_summary.py). The one wording of these flags, used by every surface that shows a cell: ``make run``'s
table (engine/outputs.py), report.md (report/markdown.py), ``dlperf results show`` and the results
page (history/rows.py), the DAG run's note (history/links.py) and the Conbench export."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlperf_tasks.report.llm_summary import llm_flags
from dlperf_tasks.report.probe_summary import probe_flags

# A cell whose trials spread more than this (stdev / mean) is flagged noisy: its median is not
# worth comparing until the cause (thermal, a shared node, a straggler) is found.
NOISY_CV = 0.05


def cell_flags(c: Mapping[str, Any], cv_bound: float = NOISY_CV) -> list[str]:
    out = []
    cv = c.get("cv")
    if isinstance(cv, (int, float)) and cv > cv_bound:
        out.append(f"noisy: CV {100 * cv:.2f}% > {100 * cv_bound:.0f}%")
    sp, gpus, eff = c.get("speedup"), c.get("gpus"), c.get("scaling_efficiency")
    if isinstance(sp, (int, float)) and isinstance(gpus, int) and gpus > 1 and sp > gpus:
        out.append(f"superlinear: speedup {sp:.2f} on {gpus} GPUs")
    elif isinstance(eff, (int, float)) and eff > 1.0:
        out.append(f"efficiency {eff:.2f} > 1")
    st = c.get("steady_state")
    if isinstance(st, Mapping) and st.get("steady") is False:
        out.append("unsteady window" + (f": {', '.join(map(str, st.get('unsteady_trials') or []))}"
                                        if st.get("unsteady_trials") else ""))
    return out + llm_flags(c) + probe_flags(c)


def row_flags(c: Mapping[str, Any]) -> list[str]:
    """:func:`cell_flags`, and "no valid trial" for a cell that has none."""
    out = cell_flags(c)
    if isinstance(c.get("n_valid"), int) and c["n_valid"] == 0:
        out.insert(0, "no valid trial")
    return out


def flags_text(c: Mapping[str, Any]) -> str:
    """A cell's flags on one line ("" when none)."""
    return "; ".join(row_flags(c))


def flags_lines(cells: list[Mapping[str, Any]]) -> list[str]:
    """report.md's "Flags" section (empty list: nothing to flag)."""
    rows = [(c.get("cell_id"), f) for c in cells for f in [row_flags(c)] if f]
    if not rows:
        return []
    return (["## Flags", "", "Read these cells' numbers with care:", ""]
            + [f"* {cid}: {'; '.join(f)}" for cid, f in rows] + [""])
