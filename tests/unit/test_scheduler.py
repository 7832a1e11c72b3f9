"""The packing scheduler: policies, node choice, cooldown, simulation vs lower bound."""

from __future__ import annotations

import pytest

from dlperf_tasks.policy.scheduler import Job, Scheduler, lower_bound, simulate

NODES4 = {"n1": 8, "n2": 8, "n3": 8, "n4": 8}


def dlperf_jobs(trials=5):
    """A DLPerf-like sweep: 1n1g, 1n8g, 2n8g, 4n8g x trials, duration ~ constant per trial."""
    jobs = []
    for topo, nodes, gpus in (("1n1g", 1, 1), ("1n8g", 1, 8), ("2n8g", 2, 8), ("4n8g", 4, 8)):
        for t in range(1, trials + 1):
            jobs.append(Job(f"{topo}/t{t}", nodes, gpus, 100.0))
    return jobs


def test_sequential_is_plan_order_on_first_nodes():
    jobs = dlperf_jobs(2)
    sim = simulate(jobs, NODES4, {j.key: 10.0 for j in jobs}, policy="sequential")
    assert [a.job.key for a in sim.assignments] == [j.key for j in jobs]
    assert all(a.nodes == list(NODES4)[: a.job.nodes] for a in sim.assignments)
    assert sim.makespan == pytest.approx(80.0)


def test_packed_runs_disjoint_nodes_and_beats_sequential():
    jobs = dlperf_jobs(5)
    durs = {j.key: 10.0 for j in jobs}
    seq = simulate(jobs, NODES4, durs, policy="sequential")
    packed = simulate(jobs, NODES4, durs, policy="packed")
    assert seq.makespan == pytest.approx(200.0)
    # 5x4n + 5x2n + 10x1n = 20+10+10 = 40 node-trials of 10 s on 4 nodes -> bound 100 s
    assert packed.lower_bound == pytest.approx(100.0)
    assert packed.makespan == pytest.approx(100.0)
    # never two trials on one node at the same time
    for a in packed.assignments:
        for b in packed.assignments:
            if a is not b and set(a.nodes) & set(b.nodes):
                assert a.end <= b.start or b.end <= a.start


def test_exclusive_multinode_runs_alone():
    jobs = dlperf_jobs(2)
    sim = simulate(jobs, NODES4, {j.key: 10.0 for j in jobs}, policy="packed_exclusive_multinode")
    for a in sim.assignments:
        if a.job.nodes > 1:
            overlapping = [b for b in sim.assignments if b is not a and b.start < a.end and a.start < b.end]
            assert overlapping == []
    assert sim.makespan >= sim.lower_bound


def test_order_is_node_seconds_descending():
    jobs = [Job("short", 1, 1, 1.0), Job("long", 1, 1, 50.0), Job("wide", 3, 1, 10.0)]
    s = Scheduler(jobs, {"a": 1, "b": 1, "c": 1})
    starts = s.next_starts(0.0)
    # long takes node a; wide (3 nodes) does not fit, short backfills node b
    assert [(a.job.key, a.nodes) for a in starts] == [("long", ["a"]), ("short", ["b"])]


def test_cooldown_and_gpu_capacity_and_down_nodes():
    jobs = [Job("a", 1, 8, 1.0), Job("b", 1, 8, 1.0)]
    sim = simulate(jobs, {"big": 8, "small": 4}, {"a": 10.0, "b": 10.0}, cooldown_s=5.0)
    assert all(a.nodes == ["big"] for a in sim.assignments)
    assert sim.makespan == pytest.approx(25.0)
    s = Scheduler([Job("x", 2, 1)], {"n1": 1, "n2": 1})
    s.mark_down("n2")
    assert s.next_starts(0) == [] and [j.key for j in s.drop_impossible()] == ["x"]


def test_lower_bound_formula_and_bad_policy():
    jobs = [Job("a", 2, 1), Job("b", 1, 1)]
    assert lower_bound(jobs, {"a": 10, "b": 4}, 4) == 10  # max(24/4, 10)
    assert lower_bound(jobs, {"a": 10, "b": 40}, 2) == 40
    with pytest.raises(ValueError, match="unknown scheduling policy 'fast'"):
        Scheduler(jobs, {"n": 1}, policy="fast")
