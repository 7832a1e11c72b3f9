"""A/B confirmation of a regression finding: re-run the cell with the previous good image (A)
and the current image (B), interleaved A B A B on the same leased nodes, and judge.

Pure logic plus the store annotation (no Airflow, no SSH):

* :func:`plan_confirmation` turns one finding of a run's ``regressions`` annotation into a
  :class:`ConfirmPlan`: the cell (and its 1n1g baseline cell when the finding is about
  scaling), image A = the previous good run's image (by digest when known) and image B = the
  flagged run's, ``rounds`` rounds of ``A, B`` per cell. ``plan.to_conf()`` is the conf of the
  follow-up DAG run (``{"confirm": {...}}``; ``dlperf confirm`` runs the same plan itself).
* :func:`judge` takes the A and B trial values and gives the verdict: ``confirmed`` when the
  CI of the B-vs-A effect lies wholly on the bad side and the effect is at least
  ``min_effect``; else ``not_reproduced``. The effect is the Hodges-Lehmann estimate of
  ``log(B / A)`` (median of all pairwise log ratios, reported as a percentage) with the exact
  distribution-free Mann-Whitney CI (the coverage achieved is in the record); for a scaling
  finding the values are per-round speedups (cell / 1n1g of the same round and image).
  The env diff between A and B (image digest, driver, CUDA/NCCL, transport) is part of it.
* :func:`record` stores the verdict in the flagged run's ``confirmations`` annotation
  (``store.annotate_run``; a short badge in the index row) and notifies: with
  ``DLPERF_NOTIFY_ON=confirmed`` the regression check itself sends nothing and only
  confirmed findings reach ``DLPERF_NOTIFY_URL``.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from dlperf_tasks.history.robust import mann_whitney_u
from dlperf_tasks.history.runs import RUN_ENV_KEYS, env_diff
from dlperf_tasks.history.notify import notify
from dlperf_tasks.history.cellspec import parse_cell_id

CONFIRMED = "confirmed"
NOT_REPRODUCED = "not_reproduced"
ANNOTATION = "confirmations"
NOTIFY_ON_ENV = "DLPERF_NOTIFY_ON"  # findings (default) | confirmed


def notify_only_confirmed(value: str | None = None) -> bool:
    """True when notifications should fire only for confirmed findings."""
    v = (value if value is not None else os.environ.get(NOTIFY_ON_ENV, "findings")).strip().lower()
    if v not in ("findings", "confirmed", ""):
        raise ValueError(f"{NOTIFY_ON_ENV} must be 'findings' or 'confirmed', not {v!r}")
    return v == "confirmed"


def image_ref(env: Mapping[str, Any]) -> str | None:
    """``repo@sha256:...`` when the run recorded a digest (the exact image), else the tag."""
    image, digest = env.get("image"), env.get("image_digest")
    if digest and image:
        if "@" in str(digest):
            return str(digest)
        repo = str(image).split("@")[0]
        last = repo.rsplit("/", 1)[-1]
        if ":" in last:
            repo = repo[: len(repo) - len(last)] + last.split(":")[0]
        return f"{repo}@{digest}"
    return image


@dataclass
class ConfirmPlan:
    suite: str
    run_id: str  # the flagged run
    finding: str  # "<kind>:<cell_id>"
    kind: str  # throughput | scaling
    cell_id: str
    cells: list[str]
    image_a: str
    image_b: str
    run_a: str  # the previous good run
    rounds: int = 4
    higher_is_better: bool = True
    nodes: list[str] = field(default_factory=list)  # filled by the engine: the leased nodes
    env_a: dict[str, Any] = field(default_factory=dict)
    env_b: dict[str, Any] = field(default_factory=dict)

    def order(self) -> list[tuple[str, str, int]]:
        """``(variant, cell_id, round)`` in run order: per round A then B, every cell."""
        return [(v, c, r) for r in range(1, self.rounds + 1) for v in ("A", "B") for c in self.cells]

    def to_conf(self) -> dict[str, Any]:
        return {"confirm": asdict(self)}

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "ConfirmPlan":
        d = dict(conf.get("confirm", conf))
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"confirm conf: unknown key(s) {', '.join(sorted(unknown))}")
        p = cls(**d)
        if p.rounds < 2 or p.rounds > 20:
            raise ValueError("confirm rounds must be in 2..20")
        return p


# the conf of a confirmation DAG run (``{"confirm": ConfirmPlan.to_conf()["confirm"]}``), checked by
# the run form (the DAG params module) before the plan task re-checks every value against the suite/cluster
_NAME = r"^[A-Za-z0-9<][A-Za-z0-9._:+@=<>/-]{0,399}$"  # "<ip-1>:5000/...": the store redacts addresses
CONF_SCHEMA: dict[str, Any] = {
    "type": ["null", "object"], "additionalProperties": False,
    "required": ["suite", "run_id", "finding", "kind", "cell_id", "cells", "image_a", "image_b", "run_a"],
    "properties": {
        "suite": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"},
        "run_id": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:+@=-]{0,199}$"},
        "run_a": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:+@=-]{0,199}$"},
        "finding": {"type": "string", "pattern": _NAME}, "cell_id": {"type": "string", "pattern": _NAME},
        "kind": {"type": "string", "enum": ["throughput", "scaling"]},
        "cells": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string", "pattern": _NAME}},
        "image_a": {"type": "string", "pattern": _NAME}, "image_b": {"type": "string", "pattern": _NAME},
        "rounds": {"type": "integer", "minimum": 2, "maximum": 20}, "higher_is_better": {"type": "boolean"},
        "nodes": {"type": "array", "maxItems": 64, "items": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}},
        "env_a": {"type": "object"}, "env_b": {"type": "object"},
    },
}


def _env_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten an index row's / result's run env (image, image_digest, upstream_commit + env)."""
    src = row.get("env", row) if "env" in row and isinstance(row.get("env"), Mapping) else row
    out = {k: src.get(k) for k in RUN_ENV_KEYS if src.get(k) is not None}
    inner = src.get("env")
    if isinstance(inner, Mapping):
        out.update({k: v for k, v in inner.items() if not isinstance(v, (dict, list))})
    return out


def plan_confirmation(regressions: Mapping[str, Any], finding: str | int, rows: Sequence[Mapping[str, Any]],
                      rounds: int = 4) -> ConfirmPlan:
    """The A/B plan for one finding of a ``regressions`` annotation (index or ``kind:cell_id``).
    ``rows`` are the suite's index rows (``store.list_runs(suite)``): they give both images."""
    fs = list(regressions.get("findings") or [])
    if isinstance(finding, int):
        if not 0 <= finding < len(fs):
            raise ValueError(f"run {regressions.get('run_id')} has {len(fs)} finding(s), no #{finding}")
        f = fs[finding]
    else:
        f = next((x for x in fs if f"{x['kind']}:{x['cell_id']}" == finding), None)
        if f is None:
            raise ValueError(f"run {regressions.get('run_id')} has no finding {finding!r}; "
                             f"it has: {', '.join(x['kind'] + ':' + x['cell_id'] for x in fs) or 'none'}")
    by_id = {r.get("run_id"): r for r in rows}
    run_id = regressions.get("run_id")
    run_a = previous_good(rows, str(run_id)) or f.get("baseline_run")
    if run_id not in by_id or run_a not in by_id:
        raise ValueError(f"confirmation needs index rows of run {run_id} and its baseline {run_a}")
    env_a, env_b = _env_of(by_id[run_a]), _env_of(by_id[run_id])
    a, b = image_ref(env_a), image_ref(env_b)
    if not a or not b:
        raise ValueError(f"runs {run_a} / {run_id} recorded no image: nothing to compare A/B")
    cells = [f["cell_id"]]
    if f["kind"] == "scaling":
        bid = parse_cell_id(f["cell_id"]).baseline_id
        if bid and bid != f["cell_id"]:
            cells.append(bid)
    return ConfirmPlan(suite=str(regressions.get("suite") or by_id[run_id].get("suite")), run_id=str(run_id),
                       finding=f"{f['kind']}:{f['cell_id']}", kind=f["kind"], cell_id=f["cell_id"], cells=cells,
                       image_a=a, image_b=b, run_a=str(run_a), rounds=rounds,
                       higher_is_better=f.get("unit") != "ms/iter", env_a=env_a, env_b=env_b)


def _good(row: Mapping[str, Any]) -> bool:
    """An ok run with no regression finding, or whose findings all failed to reproduce."""
    if row.get("status", "ok") != "ok":
        return False
    badge = row.get("regressions") or {}
    if not badge.get("findings"):
        return True
    conf = row.get(ANNOTATION) or {}
    return all(conf.get(c) == NOT_REPRODUCED for c in badge.get("cells", []))


def previous_good(rows: Sequence[Mapping[str, Any]], run_id: str) -> str | None:
    """The most recent run before ``run_id`` (index rows, oldest first) that is good (:func:`_good`)."""
    ids = [r.get("run_id") for r in rows]
    if run_id not in ids:
        return None
    earlier = sorted(rows[: ids.index(run_id)], key=lambda r: str(r.get("started_at") or ""))
    return next((r["run_id"] for r in reversed(earlier) if _good(r)), None)


# ---- the verdict ------------------------------------------------------------------------
def _mw_null_cdf(n: int, m: int) -> list[float]:
    """P(U <= u) for u = 0..n*m under H0 (exact, by counting)."""
    # f[i][j][u]: number of arrangements; iterative over (i, j) with a dict of u -> count
    table = {(0, 0): {0: 1}}
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            cur: dict[int, int] = {}
            if i > 0:  # the largest element is from x: it exceeds all j y's
                for u, c in table[(i - 1, j)].items():
                    cur[u + j] = cur.get(u + j, 0) + c
            if j > 0:
                for u, c in table[(i, j - 1)].items():
                    cur[u] = cur.get(u, 0) + c
            table[(i, j)] = cur
    counts = table[(n, m)]
    total = math.comb(n + m, n)
    acc, out = 0, []
    for u in range(n * m + 1):
        acc += counts.get(u, 0)
        out.append(acc / total)
    return out


def shift_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """Hodges-Lehmann shift of ``b`` vs ``a`` and its exact Mann-Whitney CI:
    ``(estimate, lo, hi, coverage achieved)``."""
    diffs = sorted(y - x for x in a for y in b)
    n, m = len(a), len(b)
    cdf = _mw_null_cdf(n, m)
    alpha2 = (1.0 - confidence) / 2.0
    k = 0  # largest k with P(U <= k-1) <= alpha/2
    while k < len(cdf) and cdf[k] <= alpha2:
        k += 1
    k = max(k, 1)
    coverage = 1.0 - 2.0 * cdf[k - 1] if k - 1 < len(cdf) else 0.0
    return statistics.median(diffs), diffs[k - 1], diffs[len(diffs) - k], max(0.0, coverage)


def round_values(plan: ConfirmPlan, values: Mapping[str, Mapping[str, Sequence[float | None]]]) -> dict[str, list[float]]:
    """The per-round values compared: the cell's values (throughput finding) or per-round
    speedups cell / 1n1g of the same round (scaling finding). ``values[variant][cell] = [...]``."""
    out = {}
    for v in ("A", "B"):
        cell = list(values.get(v, {}).get(plan.cell_id, []))
        if plan.kind == "scaling" and len(plan.cells) > 1:
            base = list(values.get(v, {}).get(plan.cells[1], []))
            out[v] = [c / b for c, b in zip(cell, base) if c and b]
        else:
            out[v] = [c for c in cell if c is not None and math.isfinite(c) and c > 0]
    return out


def judge(plan: ConfirmPlan, values: Mapping[str, Mapping[str, Sequence[float | None]]], *,
          confidence: float = 0.95, min_effect: float = 0.02, env_a: Mapping[str, Any] | None = None,
          env_b: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The confirmation record for ``plan`` from the A/B trial values."""
    rv = round_values(plan, values)
    a, b = rv["A"], rv["B"]
    ea, eb = dict(env_a if env_a is not None else plan.env_a), dict(env_b if env_b is not None else plan.env_b)
    doc: dict[str, Any] = {"finding": plan.finding, "kind": plan.kind, "cell_id": plan.cell_id, "cells": plan.cells,
                           "run_id": plan.run_id, "run_a": plan.run_a, "image_a": plan.image_a,
                           "image_b": plan.image_b, "rounds": plan.rounds, "nodes": plan.nodes,
                           "values_a": [round(x, 6) for x in a], "values_b": [round(x, 6) for x in b],
                           "env_diff": env_diff(ea, eb), "min_effect_pct": 100 * min_effect}
    if len(a) < 2 or len(b) < 2:
        doc.update(status=NOT_REPRODUCED, note=f"too few valid A/B values ({len(a)} A, {len(b)} B)",
                   effect_pct=None, ci_pct=None, p_value=None, ci_confidence=None)
        return doc
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    est, lo, hi, cov = shift_interval(la, lb, confidence)
    pct = lambda x: round(100.0 * (math.exp(x) - 1.0), 4)  # noqa: E731
    bad_side = "less" if plan.higher_is_better else "greater"
    _, p = mann_whitney_u(b, a, alternative=bad_side)
    worse = hi < 0 if plan.higher_is_better else lo > 0
    big = abs(math.exp(est) - 1.0) >= min_effect
    status = CONFIRMED if worse and big else NOT_REPRODUCED
    doc.update(status=status, effect_pct=pct(est), ci_pct=[pct(lo), pct(hi)], ci_confidence=round(cov, 4),
               p_value=float(f"{p:.3g}"), median_a=statistics.median(a), median_b=statistics.median(b))
    doc["note"] = (f"B vs A {pct(est):+.2f} % (CI {pct(lo):+.2f} .. {pct(hi):+.2f} %, {cov * 100:.1f} %), "
                   + ("reproduced" if status == CONFIRMED else "not reproduced: the CI reaches the good side or "
                      f"the effect is below {100 * min_effect:g} %"))
    return doc


def record(store: Any, doc: Mapping[str, Any], *, notify_target: str | None = None,
           send: Any = None) -> bool:
    """Merge ``doc`` into the flagged run's ``confirmations`` annotation (key = the finding) and
    its index badge; notify when confirmed: through ``send(report)`` when given (the DAG path:
    every configured Airflow notifier), else the webhook (target, else ``DLPERF_NOTIFY_URL``).
    Returns sent."""
    run_id = doc["run_id"]
    current = store.read_annotation(run_id, ANNOTATION) or {"run_id": run_id, "findings": {}}
    current["findings"][doc["finding"]] = dict(doc)
    badge = {k: doc2["status"] for k, doc2 in sorted(current["findings"].items())}
    store.annotate_run(run_id, ANNOTATION, current, index_value=badge)
    if doc.get("status") != CONFIRMED:
        return False
    report = {"run_id": run_id, "kind": "confirmation", "findings": [dict(doc)]}
    if send is not None:
        return bool(send(report))
    return notify(report, notify_target)


def status_of(annotation: Mapping[str, Any] | None, finding: str) -> str:
    """``confirmed`` / ``not_reproduced`` / ``unconfirmed`` for ``kind:cell_id``."""
    doc = ((annotation or {}).get("findings") or {}).get(finding)
    return doc["status"] if doc else "unconfirmed"


def status_suffix(annotation: Mapping[str, Any] | None, finding: str) -> str:
    """`` [confirmed: -8.00 % (CI -8.1 .. -7.9 %)]`` / `` [not reproduced]`` / `` [unconfirmed]``
    for CLI lines and the results page."""
    doc = ((annotation or {}).get("findings") or {}).get(finding)
    if not doc:
        return " [unconfirmed]"
    if doc.get("status") == CONFIRMED:
        ci = doc.get("ci_pct") or [None, None]
        return f" [confirmed by A/B: {doc['effect_pct']:+.2f} % (CI {ci[0]:+.2f} .. {ci[1]:+.2f} %)]"
    return " [not reproduced by A/B]"
