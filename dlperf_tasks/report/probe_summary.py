"""A multi-node cell's interconnect probe over its trials, its flags and the slow-cell attribution,
for result.json, report.md and every surface that shows a cell's flags.

Each trial record carries the probe run on its nodes before it (``engine/probe.py``; one probe per
node set). The cell's ``interconnect`` entry is the probe with the lowest bus bandwidth (a failed
probe counts lowest), the others' node sets and figures under ``probes``, and the flags of all of
them. :func:`annotate` adds the attribution of a slow probed cell (scaling efficiency below the probe's
``slow_scaling_below``): the interconnect (probe flags), a straggler rank (the run's straggler scan,
``run.stragglers``) or, when neither moved, the compute side (``measure/interconnect.attribute``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dlperf_tasks.measure.interconnect import DEFAULTS, attribute

PROBE_HEADING = "## Interconnect probe (nccl-tests all_reduce_perf before each multi-node cell)"


def _busbw(p: Mapping[str, Any]) -> float:
    v = p.get("busbw_gbs")
    return float(v) if isinstance(v, (int, float)) and not p.get("error") else -1.0


def cell_interconnect(trials: Iterable[Any]) -> dict[str, Any] | None:
    """The cell's ``interconnect`` entry (None when no trial carries a probe)."""
    probes: list[Mapping[str, Any]] = []
    for t in trials:
        p = getattr(t, "interconnect", None)
        if isinstance(p, Mapping) and p not in probes:
            probes.append(p)
    if not probes:
        return None
    worst = min(probes, key=_busbw)
    out = dict(worst)
    out["flags"] = list(dict.fromkeys(str(f) for p in probes for f in p.get("flags") or []))
    if len(probes) > 1:
        out["probes"] = [{"nodes": p.get("nodes"), "busbw_gbs": p.get("busbw_gbs"), "transports": p.get("transports"),
                          "error": p.get("error")} for p in probes]
    return out


def annotate(result: dict[str, Any]) -> None:
    """Put each slow probed multi-node cell's attribution in its ``slow_attribution`` (in place)."""
    reports = ((result.get("run") or {}).get("stragglers") or {}).get("trials") or []
    slow_by_trial = {r.get("trial_id"): list(r.get("slow") or []) for r in reports if isinstance(r, Mapping)}
    for c in result.get("cells") or []:
        if not isinstance(c.get("nodes"), int) or c["nodes"] < 2:
            continue
        probe = c.get("interconnect") if isinstance(c.get("interconnect"), Mapping) else None
        if probe is None:  # not probed (the suite declares no probe, or it is switched off)
            continue
        below = float((probe or {}).get("slow_scaling_below") or DEFAULTS["slow_scaling_below"])
        ids = {f"{c.get('cell_id')}/t{t.get('index')}" for t in c.get("trials") or []}
        stragglers = sorted({n for tid in ids for n in slow_by_trial.get(tid, [])})
        why = attribute(probe, stragglers, c.get("scaling_efficiency"), below)
        if why:
            c["slow_attribution"] = why


def probe_flags(c: Mapping[str, Any]) -> list[str]:
    """The probe's flags and a slow cell's attribution (the wording every surface shows)."""
    probe = c.get("interconnect")
    out = [str(f) for f in (probe.get("flags") or [])] if isinstance(probe, Mapping) else []
    if c.get("slow_attribution"):
        out.append(str(c["slow_attribution"]))
    return out


def _gbs(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, (int, float)) else "n/a"


def probe_table(cells: list[Mapping[str, Any]]) -> list[str]:
    """report.md's probe section (empty list when no cell carries a probe)."""
    rows = [c for c in cells if isinstance(c.get("interconnect"), Mapping)]
    if not rows:
        return []
    out = [PROBE_HEADING, "", "Bus bandwidth = algbw x 2(n-1)/n at the largest message (nccl-tests doc/PERFORMANCE.md).", "",
           "| cell | nodes | bus bandwidth GB/s | expected GB/s (min fraction) | transport | verdict |",
           "| --- | --- | --- | --- | --- | --- |"]
    for c in rows:
        p = c["interconnect"]
        exp = (f"{_gbs(p.get('expected_busbw_gbs'))} ({p.get('min_fraction')})" if p.get("expected_busbw_gbs")
               else "not configured")
        verdict = "; ".join(probe_flags(c)) or "as expected"
        out.append(f"| {c.get('cell_id')} | {', '.join(map(str, p.get('nodes') or []))} | {_gbs(p.get('busbw_gbs'))} "
                   f"| {exp} | {', '.join(p.get('transports') or []) or 'n/a'} | {verdict.replace('|', '/')} |")
    return out + [""]
