"""Node health: name the node that is slower than its peers or has errors, and keep it out.

Pure logic (no SSH, no store, no Airflow); the quarantine state lives in :mod:`dlperf_tasks.store.quarantine`. Evidence, per node and trial:

* **single-node trials** of one cell that ran on different nodes (the packed scheduler spreads
  them): a trial's slow-down = how much worse its value is than the median of the same
  cell's valid trials on the *other* nodes (throughput: ``1 - v / peers``; latency:
  ``v / peers - 1``);
* **multi-node trials**: :mod:`dlperf_tasks.measure.stragglers` compares the nodes of one trial by
  their per-rank step times; its ``slowdown`` per node is taken as is;
* **errors**: a node whose exit code was non-zero in a trial that did not end OK;
* **telemetry** (when present): GPU throttling and XID errors per node
  (``{node: {"xid": [codes] | count, "throttle": bool | count | fraction}}``).

A node is **suspect** when it was slower than its peers by more than a robust margin in at
least ``min_slow_trials`` (default 2) trials *and* in at least half of the trials in which it
could be compared, or had XID errors, or failed ``min_error_trials`` (default 2) trials. The
margin is ``max(threshold, centre + k * sigma)`` (default threshold 5 %, k = 4), sigma the
trial-to-trial noise of the slow-downs: noise every node shares does not name anyone. Nodes whose
median slow-down is above the threshold are left out of the references, and each node's own
offset out of sigma (two passes, :func:`assess_run`), so that a slow node cannot hide behind the
noise it causes in its peers.

Quarantine (``quarantine: true``): during a sweep the engine stops giving a suspect node
trials (``Scheduler.mark_down``); in the service the node stays out until someone clears it
with ``dlperf cluster clear NODE``. The state lives in the **run store** of the settings
(``settings.store_url``, key ``state/quarantine.json``, :mod:`dlperf_tasks.store.state`): Celery
workers on several hosts share no disk, and every worker, every DAG run and the CLI on any host
must see the same quarantined nodes. It is private (never listed as a run, never published).
A plain directory (``Quarantine(work_dir)``: ``<work_dir>/quarantine.json`` under an flock)
remains for callers without settings (tests, a library user's sweep).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

REPORT_HEADING = "## Node health"
MAD_SCALE = 1.4826
PAIR_SPAN = 10  # node_margin: each trial's slow-down is differenced with its node's next 10


@dataclass(frozen=True)
class HealthConfig:
    threshold: float = 0.05  # minimum slow-down that counts (5 %)
    k: float = 4.0  # robust margin: k * MAD-sigma of all slow-downs
    min_slow_trials: int = 2
    min_error_trials: int = 2
    quarantine: bool = False

    def __post_init__(self) -> None:
        if self.threshold <= 0 or self.k < 0 or self.min_slow_trials < 1 or self.min_error_trials < 1:
            raise ValueError("node health: threshold > 0, k >= 0, min_slow_trials and min_error_trials >= 1")

    @classmethod
    def from_value(cls, value: Any) -> "HealthConfig":
        if value is None or value is False:
            return cls()
        if value is True:
            return cls(quarantine=True)
        if not isinstance(value, Mapping):
            raise ValueError(f"node_health must be true/false or a mapping, got {type(value).__name__}")
        bad = sorted(set(value) - set(cls.__dataclass_fields__))
        if bad:
            raise ValueError(f"node_health: unknown key(s) {', '.join(bad)}")
        return cls(**dict(value))


@dataclass
class Observation:
    """One node in one trial: its slow-down against its peers (None = error only)."""

    node: str
    trial_id: str
    source: str  # cell | straggler | error
    slowdown: float | None = None
    detail: str = ""


@dataclass
class NodeVerdict:
    node: str
    suspect: bool = False
    judged_trials: int = 0
    slow_trials: int = 0
    error_trials: int = 0
    median_slowdown: float | None = None
    xid: list = field(default_factory=list)
    throttle: Any = None
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["median_slowdown"] is not None:
            d["median_slowdown"] = round(d["median_slowdown"], 6)
        return d


# ---- observations ---------------------------------------------------------------------
def _trial_value(t: Mapping[str, Any]) -> float | None:
    v = t.get("value")
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def cell_observations(result: Mapping[str, Any], exclude: Iterable[str] = ()) -> list[Observation]:
    """Single-node trials of each cell, compared with the same cell's trials on other nodes
    (none of them in ``exclude``: the candidates, see :func:`assess_run`)."""
    exclude = set(exclude)
    out: list[Observation] = []
    for cell in result.get("cells", []):
        latency = cell.get("metric_kind") == "latency"
        runs = []
        for t in cell.get("trials", []):
            names = list(t.get("node_names") or [])
            v = _trial_value(t)
            if len(names) == 1 and t.get("status") == "OK" and v is not None:
                runs.append((names[0], v, t.get("trial_id") or f"{cell.get('cell_id')}/t{t.get('index')}"))
        if len({n for n, _, _ in runs}) < 2:
            continue
        for node, v, tid in runs:
            peers = [x for n, x, _ in runs if n != node and n not in exclude]
            if not peers:
                continue
            ref = statistics.median(peers)
            slow = (v / ref - 1.0) if latency else (1.0 - v / ref)
            out.append(Observation(node, tid, "cell", slow, f"{v:.2f} vs {ref:.2f} on other nodes"))
    return out


def straggler_observations(reports: Iterable[Mapping[str, Any]]) -> list[Observation]:
    """From ``stragglers.json`` trial entries (``StragglerReport.to_dict()``)."""
    return [Observation(node, r.get("trial_id", ""), "straggler", float(s), "median step time vs the other nodes")
            for r in reports for node, s in (r.get("slowdown") or {}).items()]


def error_observations(result: Mapping[str, Any]) -> list[Observation]:
    """Nodes with a non-zero exit code in a trial that did not end OK."""
    out = []
    for cell in result.get("cells", []):
        for t in cell.get("trials", []):
            if t.get("status") == "OK":
                continue
            for node, code in (t.get("exit_codes") or {}).items():
                if code not in (0, None):
                    out.append(Observation(node, t.get("trial_id", ""), "error", None,
                                           f"exit {code} ({t.get('status')}: {t.get('reason', '')})"[:200]))
    return out


def telemetry_facts(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{node: {"xid": [codes], "throttle": trials}}`` from the trials' telemetry flags
    (``dlperf_tasks/telemetry/summary.py``: ``flags: [{kind: xid|throttled, node, detail}]``)."""
    out: dict[str, dict[str, Any]] = {}
    for cell in result.get("cells", []):
        for t in cell.get("trials", []):
            for f in ((t.get("telemetry") or {}).get("flags") or []):
                node = f.get("node")
                if not node:
                    continue
                d = out.setdefault(node, {"xid": [], "throttle": 0})
                if f.get("kind") == "xid":
                    d["xid"].append(f.get("detail") or "xid")
                elif f.get("kind") == "throttled":
                    d["throttle"] += 1
    return out


# ---- verdicts --------------------------------------------------------------------------
def margin(observations: Sequence[Observation], cfg: HealthConfig) -> float:
    slows = [o.slowdown for o in observations if o.slowdown is not None]
    if len(slows) < 3:
        return cfg.threshold
    med = statistics.median(slows)
    sigma = MAD_SCALE * statistics.median([abs(s - med) for s in slows])
    return max(cfg.threshold, med + cfg.k * sigma)


def _xid_list(facts: Mapping[str, Any]) -> list:
    x = facts.get("xid", facts.get("xid_errors"))
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, (int, float)) and x > 0:
        return [int(x)]
    return []


def assess(observations: Sequence[Observation], nodes: Iterable[str] = (), telemetry: Mapping[str, Any] | None = None,
           cfg: HealthConfig | None = None, slow_margin: float | None = None) -> list[NodeVerdict]:
    """One verdict per node (every node in ``nodes`` or in the observations), suspects first.
    ``slow_margin``: the margin to use (default: :func:`margin` of the observations)."""
    cfg = cfg or HealthConfig()
    m = margin(observations, cfg) if slow_margin is None else slow_margin
    names = list(dict.fromkeys(list(nodes) + [o.node for o in observations] + list(telemetry or {})))
    out = []
    for node in names:
        mine = [o for o in observations if o.node == node]
        judged = [o for o in mine if o.slowdown is not None]
        slow = [o for o in judged if o.slowdown > m]
        errors = {o.trial_id for o in mine if o.source == "error"}
        v = NodeVerdict(node, judged_trials=len(judged), slow_trials=len(slow), error_trials=len(errors))
        if judged:
            v.median_slowdown = statistics.median(o.slowdown for o in judged)
        facts = (telemetry or {}).get(node) or {}
        v.xid, v.throttle = _xid_list(facts), facts.get("throttle", facts.get("throttled"))
        if len(slow) >= cfg.min_slow_trials and 2 * len(slow) >= len(judged):
            v.suspect = True
            worst = sorted(slow, key=lambda o: -o.slowdown)[:3]
            v.evidence.append(f"slower than its peers by more than {m * 100:.1f} % in {len(slow)} of {len(judged)} "
                              f"compared trial(s) (median {v.median_slowdown * 100:+.1f} %): "
                              + "; ".join(f"{o.trial_id} {o.slowdown * 100:+.1f} % ({o.detail})" for o in worst))
        if len(errors) >= cfg.min_error_trials:
            v.suspect = True
            v.evidence.append(f"failed {len(errors)} trial(s): " + "; ".join(
                f"{o.trial_id} {o.detail}" for o in mine if o.source == "error")[:400])
        if v.xid:
            v.suspect = True
            v.evidence.append(f"GPU XID error(s) {v.xid}")
        if v.throttle and (isinstance(v.throttle, bool) or float(v.throttle) > 0):
            v.evidence.append(f"GPU throttling reported ({v.throttle})")
            if v.slow_trials:
                v.suspect = True
        out.append(v)
    return sorted(out, key=lambda v: (not v.suspect, v.node))


def assess_run(result: Mapping[str, Any], straggler_reports: Iterable[Mapping[str, Any]] = (),
               telemetry: Mapping[str, Any] | None = None, cfg: HealthConfig | None = None) -> list[NodeVerdict]:
    """All evidence of one run (its result.json, its stragglers.json trials, telemetry facts).

    Two passes. A slow node drags down the reference of every trial it is a peer of: its peers
    then show slow-downs below zero, and the spread of all slow-downs (the margin's noise
    estimate) grows with the very effect it should detect (one node 20 % slow among four could
    raise the margin past 50 % and be named by nobody). So the nodes whose median slow-down
    exceeds ``threshold`` are **candidates**: the second pass compares every trial with the
    trials of the other, non-candidate nodes only, and the margin takes each node's own offset
    out of its noise estimate (:func:`_node_margin`)."""
    cfg = cfg or HealthConfig()
    other = straggler_observations(straggler_reports) + error_observations(result)
    first = cell_observations(result) + other
    candidates = _candidates(first, cfg)
    obs = cell_observations(result, exclude=candidates) + other if candidates else first
    m = _node_margin(obs, cfg)
    if m is None:  # too few repeated nodes to take their offsets out: the plain spread
        m = margin(obs if sum(o.slowdown is not None for o in obs) >= 3 else first, cfg)
    nodes = [n.get("name") for n in ((result.get("run") or {}).get("cluster") or {}).get("nodes", []) if n.get("name")]
    return assess(obs, nodes, telemetry, cfg, slow_margin=m)


def _by_node(observations: Sequence[Observation]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for o in observations:
        if o.slowdown is not None:
            out.setdefault(o.node, []).append(o.slowdown)
    return out


def _node_margin(observations: Sequence[Observation], cfg: HealthConfig) -> float | None:
    """``max(threshold, centre + k * sigma)`` with the node effects taken out: sigma from the
    differences between two trials of the same node (``|a - b| / sqrt 2`` estimates one trial's
    noise whatever the node's own offset; each trial paired with the next ``PAIR_SPAN`` of its
    node, so the cost stays linear in the trials), the centre = median of the nodes' median
    slow-downs. None with fewer than 3 such pairs."""
    by_node = _by_node(observations)
    diffs = [abs(a - b) for s in by_node.values() for i, a in enumerate(s) for b in s[i + 1:i + 1 + PAIR_SPAN]]
    if len(diffs) < 3:
        return None
    sigma = MAD_SCALE * statistics.median(diffs) / math.sqrt(2)
    centre = statistics.median(statistics.median(s) for s in by_node.values())
    return max(cfg.threshold, centre + cfg.k * sigma)


def _candidates(observations: Sequence[Observation], cfg: HealthConfig) -> set[str]:
    """Nodes whose median slow-down (first pass) is above the threshold; none when that is every
    judged node (all "slower than the rest": no healthy reference, pass one stands)."""
    by_node = _by_node(observations)
    out = {n for n, s in by_node.items() if statistics.median(s) > cfg.threshold}
    return set() if out == set(by_node) else out


def to_doc(verdicts: Sequence[NodeVerdict], quarantined: Iterable[str] = ()) -> dict[str, Any]:
    """``node-health.json`` / result.json ``run.node_health``."""
    return {"schema_version": 1, "suspects": [v.node for v in verdicts if v.suspect],
            "quarantined": sorted(set(quarantined)), "nodes": [v.to_dict() for v in verdicts]}


def render_markdown(doc: Mapping[str, Any]) -> str:
    lines = [REPORT_HEADING, ""]
    sus = [n for n in doc.get("nodes", []) if n.get("suspect")]
    if not sus:
        lines.append(f"No suspect node among {len(doc.get('nodes', []))} node(s).")
    for n in sus:
        q = " (quarantined)" if n["node"] in doc.get("quarantined", []) else ""
        lines.append(f"- **{n['node']}** suspect{q}: " + " / ".join(n.get("evidence", [])))
    return "\n".join(lines) + "\n"
