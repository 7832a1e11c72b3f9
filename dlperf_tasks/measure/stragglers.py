"""Find the slow node (straggler) of a multi-node trial from its per-node / per-rank step times.

Pure logic (no SSH, no Airflow): give it the trial's node logs (as a sweep leaves them in its
output directory at ``Framework.log_relpath``) or ready-made step times, and it compares every
node's median step time over the measured window with the median of the *other* nodes. A node
slower than that by more than ``threshold`` (default 10 %) is named::

    rep = stragglers.from_run_dir(trial_result, out_dir)      # one trial
    rep.slow          -> ["node2"]
    rep.text()        -> "trial ... : node node2 is a straggler: median step 0.640 s vs 0.320 s on the
                          other nodes (+100.0 %)"
    stragglers.scan(results, out_dir)  -> [StragglerReport, ...]  (multi-node trials only)
    stragglers.write(out_dir, reports) -> stragglers.json + a "Stragglers" section in report.md

``dlperf sweep`` does the last two itself after writing result.json/report.md (multi-node trials only).

Where the step times come from (the samples the frameworks' parsers produce):

* ``unit == "s"`` (PyTorch, TensorFlow: the log only prints a clock time per step): the step
  time is the time between consecutive step lines of the same rank / log;
* ``unit == "ms/iter"`` (MXNet BERT, Megatron): the printed latency, in seconds;
* ``unit == "samples/s"`` (ResNet50 and others): 1 / throughput (a relative step time, enough to
  compare nodes).

Each node log's samples are attributed to the node that wrote the log. Logs holding several
nodes' ranks (MXNet's ``mpirun`` writes every rank into node 0's log) are split by rank:
global rank ``r`` runs on node ``r // gpus_per_node`` (``mpirun -map-by slot`` fills node 0
first, as the launchers here do).

Limits: a framework whose non-zero nodes print no step lines (PyTorch BERT: only global rank 0
logs iterations) gives nothing to compare; the report then says which nodes were "not judged".
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from dlperf_tasks.core.model import Sample, Trial, TrialResult, Window
from dlperf_tasks import frameworks

#: default relative slow-down that makes a node a straggler (0.10 = 10 % slower than the others)
DEFAULT_THRESHOLD = 0.10
#: fewer measured steps than this on a node: not judged (reported as "too few steps")
MIN_STEPS = 3
REPORT_HEADING = "## Stragglers"


@dataclass
class NodeTiming:
    """One node's step times over the measured window (seconds per step)."""

    node: str
    node_rank: int
    steps: int
    median_step_s: float | None
    mean_step_s: float | None
    ranks: list[int] = field(default_factory=list)


@dataclass
class StragglerReport:
    """The comparison for one trial. ``slow`` names the straggler node(s), slowest first."""

    trial_id: str
    nodes: list[NodeTiming]
    slow: list[str]
    threshold: float
    #: node -> relative slow-down against the median of the other nodes (0.5 = 50 % slower)
    slowdown: dict[str, float]
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """One line a human reads in a report or a task log."""
        if not self.slow:
            judged = [t for t in self.nodes if t.median_step_s is not None]
            extra = f" ({'; '.join(self.notes)})" if self.notes else ""
            return (f"trial {self.trial_id}: no straggler among {len(judged)} node(s) "
                    f"(threshold +{self.threshold * 100:.0f} %){extra}")
        by = {t.node: t for t in self.nodes}
        parts = []
        for n in self.slow:
            others = [t.median_step_s for t in self.nodes if t.node != n and t.median_step_s is not None]
            parts.append(f"node {n} is a straggler: median step {by[n].median_step_s:.4g} s vs "
                         f"{statistics.median(others):.4g} s on the other nodes (+{self.slowdown[n] * 100:.1f} %)")
        return f"trial {self.trial_id}: " + "; ".join(parts)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["text"] = self.text()
        return d


# ---- step times -------------------------------------------------------------------------
def step_times(samples: Iterable[Sample], window: Window | None = None) -> dict[int | None, list[float]]:
    """Seconds per step for each rank found in ``samples`` (key None: untagged lines).

    Only steps inside the measured window (iteration > warmup and <= warmup + measure) count
    when ``window`` is given. Non-finite and non-positive values are ignored."""
    by_rank: dict[int | None, list[Sample]] = {}
    for s in samples:
        by_rank.setdefault(s.rank, []).append(s)
    lo, hi = (window.warmup, window.warmup + window.measure) if window else (None, None)

    def measured(it: int) -> bool:
        return lo is None or hi is None or lo < it <= hi

    out: dict[int | None, list[float]] = {}
    for rank, ss in by_rank.items():
        vals: list[float] = []
        if ss and ss[0].unit == "s":  # time stamps: differences between consecutive steps
            ordered = sorted(ss, key=lambda s: s.iteration)
            for a, b in zip(ordered, ordered[1:]):
                gap = b.iteration - a.iteration
                if gap > 0 and measured(b.iteration):
                    vals.append((float(b.value) - float(a.value)) / gap)
        else:
            for s in ss:
                if not measured(s.iteration):
                    continue
                v = float(s.value)
                if s.unit == "ms/iter":
                    vals.append(v / 1000.0)
                elif s.unit == "samples/s":
                    vals.append(1.0 / v if v > 0 else float("nan"))
                else:
                    vals.append(v)
        vals = [v for v in vals if v == v and v not in (float("inf"), float("-inf")) and v > 0]
        out[rank] = vals
    return out


def compare(per_node: Mapping[str, Sequence[float]], *, trial_id: str = "", threshold: float = DEFAULT_THRESHOLD,
            min_steps: int = MIN_STEPS, node_ranks: Mapping[str, int] | None = None,
            ranks: Mapping[str, list[int]] | None = None) -> StragglerReport:
    """Compare nodes' step times (seconds per step, in any order). A node is a straggler when its
    median step time exceeds the median of the other nodes' medians by more than ``threshold``."""
    if threshold <= 0:
        raise ValueError(f"threshold must be > 0 (a fraction such as 0.1 for 10 %), got {threshold}")
    timings, notes = [], []
    for i, (node, vals) in enumerate(per_node.items()):
        vals = list(vals)
        ok = len(vals) >= min_steps
        if not ok:
            notes.append(f"node {node}: only {len(vals)} measured step(s), not judged")
        timings.append(NodeTiming(node=node, node_rank=(node_ranks or {}).get(node, i), steps=len(vals),
                                  median_step_s=statistics.median(vals) if ok else None,
                                  mean_step_s=statistics.fmean(vals) if ok else None,
                                  ranks=list((ranks or {}).get(node, []))))
    judged = [t for t in timings if t.median_step_s is not None]
    slowdown: dict[str, float] = {}
    if len(judged) < 2:
        if len(timings) >= 2:
            notes.append("fewer than 2 nodes with step times: nothing to compare")
    else:
        step = {t.node: float(t.median_step_s or 0.0) for t in judged}  # judged: each has a median
        for t in judged:
            others = statistics.median([step[o.node] for o in judged if o is not t])
            slowdown[t.node] = round(step[t.node] / others - 1.0, 6) if others > 0 else 0.0
    slow = sorted((n for n, s in slowdown.items() if s > threshold), key=lambda n: -slowdown[n])
    return StragglerReport(trial_id=trial_id, nodes=timings, slow=slow, threshold=threshold, slowdown=slowdown,
                           notes=notes)


def per_node_step_times(node_samples: Mapping[int, Iterable[Sample]], node_names: Sequence[str], gpus_per_node: int,
                        window: Window | None = None) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Attribute each node log's step times to nodes: a log's untagged lines (or a log whose ranks
    all belong to its own node) go to the node that wrote it; ranks of other nodes (one log for
    the whole job, as with mpirun) go to node ``rank // gpus_per_node``. Per node, the step times
    of its ranks are averaged step by step (a node is as slow as its ranks together)."""
    per: dict[str, list[list[float]]] = {n: [] for n in node_names}
    ranks: dict[str, list[int]] = {n: [] for n in node_names}
    gpn = max(1, int(gpus_per_node))
    for node_rank, samples in sorted(node_samples.items()):
        own = node_names[node_rank] if node_rank < len(node_names) else f"node-rank-{node_rank}"
        per.setdefault(own, [])
        ranks.setdefault(own, [])
        by_rank = step_times(samples, window)
        tagged = [r for r in by_rank if r is not None]
        spans_nodes = len({r // gpn for r in tagged}) > 1
        for rank, vals in by_rank.items():
            node = own
            if rank is not None and spans_nodes and rank // gpn < len(node_names):
                node = node_names[rank // gpn]
            per.setdefault(node, []).append(vals)
            if rank is not None:
                ranks.setdefault(node, []).append(rank)
    merged: dict[str, list[float]] = {}
    for node, series in per.items():
        series = [s for s in series if s]
        if not series:
            merged[node] = []
            continue
        n = min(len(s) for s in series)
        merged[node] = [statistics.fmean(s[i] for s in series) for i in range(n)]
    return merged, {n: sorted(set(r)) for n, r in ranks.items()}


# ---- from a sweep's output directory ----------------------------------------------------
def from_logs(trial: Trial, node_logs: Mapping[int, Iterable[str]], node_names: Sequence[str], *,
              threshold: float = DEFAULT_THRESHOLD, window: Window | None = None) -> StragglerReport:
    """Parse each node's log (``{node_rank: lines}``) with the trial's framework and compare."""
    fw = frameworks.get(trial.cell.framework)
    samples = {r: fw.parse(lines).samples for r, lines in node_logs.items()}
    per, ranks = per_node_step_times(samples, list(node_names), trial.cell.topology.gpus_per_node,
                                     window or trial.cell.window)
    return compare(per, trial_id=trial.id, threshold=threshold,
                   node_ranks={n: i for i, n in enumerate(node_names)}, ranks=ranks)


def from_run_dir(result: TrialResult, run_dir: str | os.PathLike, *,
                 threshold: float = DEFAULT_THRESHOLD) -> StragglerReport:
    """The straggler report of one finished trial whose node logs lie in ``run_dir``."""
    trial = result.trial
    fw = frameworks.get(trial.cell.framework)
    root = Path(run_dir)
    names = list(result.nodes) or [f"node-rank-{i}" for i in range(trial.cell.topology.nodes)]
    files: dict[int, Path] = {}
    missing = []
    for r in range(trial.cell.topology.nodes):
        p = root / fw.log_relpath(trial, r)
        if p.is_file():
            files[r] = p
        else:
            missing.append(names[r] if r < len(names) else str(r))
    handles = {r: open(p, "rb") for r, p in files.items()}
    try:  # streamed line by line: logs can be large
        rep = from_logs(trial, {r: (line.decode(errors="replace") for line in f) for r, f in handles.items()},
                        names, threshold=threshold)
    finally:
        for f in handles.values():
            f.close()
    if missing:
        rep.notes.append(f"no log from node(s) {', '.join(missing)}")
    return rep


def scan(results: Iterable[TrialResult], run_dir: str | os.PathLike, *,
         threshold: float = DEFAULT_THRESHOLD) -> list[StragglerReport]:
    """Reports for every multi-node trial of ``results`` that left logs (whatever its status: a
    straggler may be why a trial hung or timed out)."""
    return [from_run_dir(r, run_dir, threshold=threshold) for r in results
            if r.trial.cell.topology.nodes > 1 and r.log_paths]


def render_markdown(reports: Sequence[StragglerReport]) -> str:
    """The report.md section: one line per trial with a straggler, then a per-node table."""
    lines = [REPORT_HEADING, ""]
    flagged = [r for r in reports if r.slow]
    if not reports:
        lines.append("No multi-node trial: nothing to compare.")
    elif not flagged:
        lines.append(f"No straggler in {len(reports)} multi-node trial(s) "
                     f"(threshold +{reports[0].threshold * 100:.0f} % median step time).")
    else:
        counts: dict[str, int] = {}
        for r in flagged:
            for n in r.slow:
                counts[n] = counts.get(n, 0) + 1
        worst = ", ".join(f"{n} ({c} trial(s))" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))
        lines += [f"**Slow node(s): {worst}** of {len(reports)} multi-node trial(s).", ""]
        lines += ["| trial | node | median step (s) | vs other nodes |", "| --- | --- | --- | --- |"]
        for r in flagged:
            for t in r.nodes:
                mark = " **straggler**" if t.node in r.slow else ""
                med = "-" if t.median_step_s is None else f"{t.median_step_s:.4g}"
                rel = r.slowdown.get(t.node)
                lines.append(f"| {r.trial_id} | {t.node}{mark} | {med} | "
                             f"{'-' if rel is None else f'{rel * 100:+.1f} %'} |")
    return "\n".join(lines) + "\n"


def write(run_dir: str | os.PathLike, reports: Sequence[StragglerReport]) -> Path:
    """Write ``stragglers.json`` into ``run_dir`` and (re)place the Stragglers section of its
    ``report.md`` (when there is one). Returns the JSON path."""
    root = Path(run_dir)
    doc = {"schema_version": 1, "slow_nodes": sorted({n for r in reports for n in r.slow}),
           "trials": [r.to_dict() for r in reports]}
    path = root / "stragglers.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    os.replace(tmp, path)
    md = root / "report.md"
    if md.is_file():
        text = md.read_text()
        head, sep, tail = text.partition(REPORT_HEADING)
        if sep:  # replace an earlier section (up to the next "## " heading)
            nxt = tail.find("\n## ")
            text = head + (tail[nxt + 1:] if nxt >= 0 else "")
        md.write_text(text.rstrip("\n") + "\n\n" + render_markdown(reports))
    return path
