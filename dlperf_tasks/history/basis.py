"""What a regression verdict is based on: ONE place that counts the cells.

Every surface that reports a regression check (``dlperf results check`` / ``show``, the task
log, ``make run``'s summary, the results page, the DAG run note, notifications) takes its
counts and its sentence from :func:`basis_of` / :func:`basis_line`, so they cannot disagree and
none claims more than was judged. Per cell (its throughput and scaling verdicts, and a loss
finding), the first that applies:

- ``regression``: a finding (throughput, scaling or loss "fast but wrong?");
- ``noisy``: a drop, but the cell's history is too noisy to call it (not flagged);
- ``improvement``: significantly faster than its history;
- not judged, ``too few trials``: no drop seen, but these trial counts could not have seen one;
- not judged, ``no history``: fewer earlier runs than the check needs (or no valid trial);
- ``ok``: judged, no change beyond the history's noise.

Judged cells = regression + noisy + improvement + ok. A check with no judged cell is never "no
regression": it is "not judged".
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

STATES = ("regression", "noisy", "improvement", "ok")
WHY = {"undecided": "too few trials", "insufficient_history": "no history", "no_data": "no history"}
_RANK = {"regression": 0, "fast but wrong?": 0, "noisy": 1, "improved": 2, "undecided": 3,
         "insufficient_history": 4, "no_data": 4, "ok": 5}


def cell_states(verdicts: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{cell_id: state}``; state is one of :data:`STATES` or ``"not judged: <why>"``.
    ``verdicts``: ``{kind, cell_id, status}`` dicts (loss verdicts count only as findings)."""
    worst: dict[str, str] = {}
    for v in verdicts:
        status, cid = str(v.get("status")), str(v.get("cell_id"))
        if v.get("kind") == "loss" and status != "fast but wrong?":
            continue
        if status not in _RANK:
            continue
        if cid not in worst or _RANK[status] < _RANK[worst[cid]]:
            worst[cid] = status
    out = {}
    for cid, status in worst.items():
        if status in ("regression", "fast but wrong?"):
            out[cid] = "regression"
        elif status == "improved":
            out[cid] = "improvement"
        elif status in ("noisy", "ok"):
            out[cid] = status
        else:
            out[cid] = f"not judged: {WHY[status]}"
    return dict(sorted(out.items()))


def summarize(verdicts: Iterable[Mapping[str, Any]], min_history: int | None = None) -> dict[str, Any]:
    """The counts every surface shows (see the module docstring)."""
    verdicts = list(verdicts)
    states = cell_states(verdicts)
    counts = {s: sum(1 for v in states.values() if v == s) for s in STATES}
    why: dict[str, int] = {}
    for v in states.values():
        if v.startswith("not judged: "):
            k = v.removeprefix("not judged: ")
            why[k] = why.get(k, 0) + 1
    # the earlier runs the unjudged-for-history cells had (the most of any: "2 earlier runs, need 3")
    earlier = [int(v["n_baseline_runs"]) for v in verdicts if v.get("status") == "insufficient_history"
               and isinstance(v.get("n_baseline_runs"), int)]
    return {"cells": len(states), "judged": sum(counts.values()), "not_judged": sum(why.values()),
            "not_judged_why": dict(sorted(why.items())), **counts, "states": states, "min_history": min_history,
            "earlier_runs": max(earlier) if earlier else None}


def basis_of(report: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The basis of a recorded report (:meth:`RegressionReport.to_dict`); reports recorded
    before the basis existed are recounted from their lists."""
    if not report:
        return None
    if isinstance(report.get("basis"), Mapping):
        return dict(report["basis"])
    vs: list[dict] = []
    for key, status in (("findings", None), ("noisy", "noisy"), ("improved", "improved"),
                        ("undecided", "undecided")):
        for v in report.get(key) or []:
            vs.append({"kind": v.get("kind"), "cell_id": v.get("cell_id"), "status": status or v.get("status")})
    vs += [{"kind": "throughput", "cell_id": c, "status": "insufficient_history"}
           for c in report.get("insufficient_history") or []]
    b = summarize(vs, (report.get("config") or {}).get("min_history"))
    extra = max(0, int(report.get("checked_cells") or 0) - b["cells"])  # the rest were judged ok
    b["ok"] += extra
    b["judged"] += extra
    b["cells"] += extra
    return b


def basis_line(b: Mapping[str, Any] | None) -> str:
    """One sentence: how many cells were judged and what came out; why the rest were not."""
    if not b:
        return "not checked against history"
    judged = (f"{b['judged']} of {b['cells']} cell(s) judged: {b['regression']} regression(s), "
              f"{b['noisy']} noisy, {b['improvement']} improvement(s), {b['ok']} ok")
    if b["not_judged"]:
        need = ""
        if b.get("min_history") and "no history" in b["not_judged_why"]:
            have = b.get("earlier_runs")
            need = (f": {have} earlier run{'' if have == 1 else 's'}, need {b['min_history']}" if have is not None
                    else f", need {b['min_history']} earlier runs")
        judged += (f"; {b['not_judged']} not judged ("
                   + ", ".join(f"{n} {why}" for why, n in b["not_judged_why"].items()) + need + ")")
    return judged


def badge(b: Mapping[str, Any] | None) -> tuple[str, str]:
    """(css class, text) of the verdict badge: never "no regression" for an unjudged run."""
    if not b:
        return "muted", "not checked"
    if b["regression"]:
        return "bad", f"{b['regression']} regression(s)"
    if not b["judged"]:
        return "muted", "not judged"
    if b["noisy"]:
        return "noisy", f"{b['noisy']} noisy"
    if b["not_judged"]:
        return "partial", f"no regression in {b['judged']} judged cell(s)"
    return "ok", "no regression"
