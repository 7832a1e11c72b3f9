"""The engine's decisions (dlperf_tasks/engine/decisions.py) driven through the real packing
Scheduler, trial by trial, as the engine's scheduling step does: adaptive trial count saves
trials on low-noise cells; a slow node is named and, with quarantine, gets no more trials and
stays out of the next sweep until cleared."""

from __future__ import annotations

import json
import random

from dlperf_tasks.engine import decisions as D
from dlperf_tasks.policy.adaptive import AdaptivePolicy
from tests.fixtures.synth import make_cell
from dlperf_tasks.core.model import MetricKind, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.policy.nodehealth import HealthConfig
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.policy.scheduler import Job, Scheduler

NODES = {f"node{i}": 8 for i in range(1, 5)}


def _trials(n_trials=5):
    cells = [make_cell(bz, topo) for bz in (24, 32) for topo in ("1n1g", "1n8g")]
    return [Trial(c, i) for c in cells for i in range(1, n_trials + 1)]


def drive(dec: D.Decisions, speed, seed=1):
    """The engine loop in miniature: returns [(trial, nodes)] in start order."""
    rng = random.Random(seed)
    sched = Scheduler([Job.from_trial(t) for t in dec.initial()], NODES)
    for n in dec.excluded():
        sched.mark_down(n)
    by_id = {t.id: t for t in dec.trials}
    started, now = [], 0.0
    while not sched.finished:
        starts = sched.next_starts(now)
        assert starts or sched.running, "scheduler stalled"
        for a in starts:
            started.append((by_id[a.job.key], a.nodes))
        key = next(iter(sched.running))
        a = sched.finish(key, now)
        now += 1.0
        t = by_id[key]
        v = speed(t, a.nodes[0]) * rng.gauss(1.0, 0.002)
        r = TrialResult(t, TrialStatus.OK, metric=TrialMetric(v, MetricKind.THROUGHPUT), nodes=list(a.nodes),
                        exit_codes={n: 0 for n in a.nodes})
        nxt, bad = dec.after_trial(r)
        for x in nxt:
            sched.requeue(Job.from_trial(x), front=False)
        for n in bad:
            sched.mark_down(n)
    return started


def test_adaptive_saves_trials_on_low_noise_cells(tmp_path):
    trials = _trials()
    dec = D.Decisions(trials, adaptive=AdaptivePolicy(), nodes=NODES)
    started = drive(dec, lambda t, node: 1000.0)
    s = dec.summary()["adaptive"]
    assert len(started) == s["trials_used"] == 12 and s["trials_max"] == 20  # 3 of 5 per cell
    assert s["saved_fraction"] == 0.4 and {c["stopped"] for c in s["cells"]} == {"converged"}
    assert len(dec.not_run()) == 8
    (tmp_path / "report.md").write_text("# r\n\n## Cells\n")
    dec.after_aggregate(tmp_path)
    assert json.loads((tmp_path / D.ADAPTIVE_FILE).read_text())["trials_used"] == 12
    assert "## Adaptive trials" in (tmp_path / "report.md").read_text()


def test_noisy_cells_run_to_the_maximum():
    dec = D.Decisions(_trials(), adaptive=AdaptivePolicy(rel_width=0.001), nodes=NODES)
    assert len(drive(dec, lambda t, node: 1000.0)) == 20


def test_slow_node_named_quarantined_and_kept_out_until_cleared(tmp_path):
    work = tmp_path / "work"
    slow = lambda t, node: 800.0 if node == "node3" else 1000.0  # noqa: E731
    dec = D.Decisions(_trials(), health=HealthConfig(quarantine=True), work_dir=work, run_id="r1", nodes=NODES)
    started = drive(dec, slow)
    on3 = [t for t, nodes in started if "node3" in nodes]
    assert "node3" in dec.quarantined and 2 <= len(on3) <= 3  # named after 2 slow trials, then avoided
    last3 = max(i for i, (_, nodes) in enumerate(started) if "node3" in nodes)
    assert any("node3" not in n for _, n in started[last3 + 1:])  # the sweep went on without it
    doc = dec.after_aggregate(tmp_path)["node_health"]
    assert doc["suspects"] == ["node3"] and doc["quarantined"] == ["node3"]
    assert "slower than its peers" in doc["nodes"][0]["evidence"][0]
    assert "node3" in Quarantine(work).nodes()
    # the next sweep (service): node3 excluded from the start
    dec2 = D.Decisions(_trials(1), health=HealthConfig(quarantine=True), work_dir=work, nodes=NODES)
    assert "dlperf cluster clear node3" in dec2.excluded()["node3"]
    assert all("node3" not in n for _, n in drive(dec2, slow))
    Quarantine(work).clear("node3")
    assert D.Decisions(_trials(1), health=HealthConfig(quarantine=True), work_dir=work).excluded() == {}


def test_without_quarantine_the_node_is_only_named():
    dec = D.Decisions(_trials(), nodes=NODES)
    started = drive(dec, lambda t, node: 800.0 if node == "node3" else 1000.0)
    assert dec.quarantined == {} and dec.summary()["node_health"]["suspects"] == ["node3"]
    assert len(started) == 20
