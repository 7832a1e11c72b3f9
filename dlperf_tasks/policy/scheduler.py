"""Which trial runs on which nodes, and when (pure logic, no I/O, no clock).

Policies
--------
``sequential``
    One trial at a time, in plan order, always on the first nodes of the inventory
    (what DLPerf did by hand; numbers are comparable with the seeds).
``packed`` (default)
    Independent trials run at the same time on disjoint free nodes. Trials are taken
    longest-first (estimated node-seconds, then width); a trial that does not fit yet
    lets smaller ones start on the free nodes (backfilling).
``packed_exclusive_multinode``
    Like ``packed`` for single-node trials, but a multi-node trial runs alone on the
    cluster (no other trial shares the network while it measures scaling).

``cooldown_s`` keeps a node idle for that long after each trial (default 0).

The same :class:`Scheduler` drives the real sweep (``dlperf_tasks.engine.sweep``) and
:func:`simulate`, which computes the makespan for given trial durations, next to
:func:`lower_bound` (max of total node-seconds / nodes and the longest trial).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Mapping, Sequence

POLICIES = ("sequential", "packed", "packed_exclusive_multinode")


@dataclass(frozen=True)
class Job:
    """What the scheduler needs to know about a trial."""

    key: Hashable  # e.g. Trial.id
    nodes: int  # number of nodes
    gpus_per_node: int = 1
    estimate_s: float = 1.0  # expected duration (only the order depends on it)

    @classmethod
    def from_trial(cls, trial, estimate_s: float | None = None) -> "Job":
        topo = trial.cell.topology
        est = estimate_s if estimate_s is not None else float(trial.cell.window.total)
        return cls(trial.id, topo.nodes, topo.gpus_per_node, est)


@dataclass
class Assignment:
    job: Job
    nodes: list[str]
    start: float
    end: float | None = None


@dataclass
class Scheduler:
    """Feed it jobs and node capacities; ask :meth:`next_starts` at each event.

    ``nodes`` maps node name -> GPUs, in inventory order. Node choice is deterministic:
    the first free nodes in inventory order.
    """

    jobs: Sequence[Job]
    nodes: Mapping[str, int]
    policy: str = "packed"
    cooldown_s: float = 0.0
    pending: list[Job] = field(init=False)
    running: dict[Hashable, Assignment] = field(init=False, default_factory=dict)
    done: list[Assignment] = field(init=False, default_factory=list)
    free_at: dict[str, float] = field(init=False)
    busy: set[str] = field(init=False, default_factory=set)
    down: set[str] = field(init=False, default_factory=set)

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if self.cooldown_s < 0:
            raise ValueError("cooldown_s must be >= 0")
        keys = [j.key for j in self.jobs]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate job keys")
        if self.policy == "sequential":
            self.pending = list(self.jobs)
        else:  # longest first: node-seconds, then width, then plan order (stable sort)
            self.pending = sorted(self.jobs, key=lambda j: (-(j.estimate_s * j.nodes), -j.nodes, -j.gpus_per_node))
        self.free_at = {n: 0.0 for n in self.nodes}

    # ---- state ------------------------------------------------------------------
    def _usable(self, job: Job) -> list[str]:
        return [n for n in self.nodes if n not in self.down and self.nodes[n] >= job.gpus_per_node]

    def impossible(self) -> list[Job]:
        """Pending jobs that can never run (not enough up nodes with enough GPUs)."""
        return [j for j in self.pending if len(self._usable(j)) < j.nodes]

    def drop_impossible(self) -> list[Job]:
        bad = self.impossible()
        self.pending = [j for j in self.pending if j not in bad]
        return bad

    def mark_down(self, node: str) -> None:
        """A node became unreachable: never schedule on it again."""
        self.down.add(node)

    def requeue(self, job: Job, front: bool = True) -> None:
        """Put a job back (retry). It keeps its place at the front of the queue."""
        if front:
            self.pending.insert(0, job)
        else:
            self.pending.append(job)

    @property
    def finished(self) -> bool:
        return not self.pending and not self.running

    def _free(self, now: float) -> list[str]:
        return [n for n in self.nodes if n not in self.busy and n not in self.down and self.free_at[n] <= now]

    def next_free_time(self, now: float) -> float | None:
        """When a cooling-down node becomes free (for the caller's wait), or None."""
        times = [t for n, t in self.free_at.items() if n not in self.busy and n not in self.down and t > now]
        return min(times) if times else None

    # ---- decisions ----------------------------------------------------------------
    def next_starts(self, now: float) -> list[Assignment]:
        """Jobs to start now, each with its nodes (marked busy)."""
        starts: list[Assignment] = []
        exclusive_running = any(a.job.nodes > 1 for a in self.running.values())
        if self.policy == "packed_exclusive_multinode" and exclusive_running:
            return starts
        if self.policy == "sequential" and self.running:
            return starts
        for job in list(self.pending):
            free = [n for n in self._free(now) if self.nodes[n] >= job.gpus_per_node]
            if self.policy == "sequential":
                if len(self._usable(job)) < job.nodes:
                    continue  # cannot ever run; caller drops it via drop_impossible()
                # sequential keeps DLPerf's order strictly: wait for the head job's nodes
                if len(free) < job.nodes:
                    break
            elif self.policy == "packed_exclusive_multinode" and job.nodes > 1:
                if self.running or starts:
                    continue  # wait until the cluster is empty
                if len(free) < job.nodes:
                    continue
            elif len(free) < job.nodes:
                continue
            chosen = free[: job.nodes]
            a = Assignment(job, chosen, now)
            self.pending.remove(job)
            self.running[job.key] = a
            self.busy.update(chosen)
            starts.append(a)
            if self.policy == "sequential" or (self.policy == "packed_exclusive_multinode" and job.nodes > 1):
                break
        return starts

    def finish(self, key: Hashable, now: float) -> Assignment:
        a = self.running.pop(key)
        a.end = now
        for n in a.nodes:
            self.busy.discard(n)
            self.free_at[n] = now + self.cooldown_s
        self.done.append(a)
        return a


# ---- simulation ---------------------------------------------------------------------
@dataclass
class Simulation:
    makespan: float
    lower_bound: float
    assignments: list[Assignment]
    unschedulable: list[Job]

    @property
    def efficiency(self) -> float:
        return self.lower_bound / self.makespan if self.makespan else 1.0


def lower_bound(jobs: Iterable[Job], durations: Mapping[Hashable, float], n_nodes: int) -> float:
    """max(total node-seconds / nodes, longest trial): no schedule can be shorter."""
    jobs = list(jobs)
    if not jobs:
        return 0.0
    total = sum(durations[j.key] * j.nodes for j in jobs)
    return max(total / n_nodes, max(durations[j.key] for j in jobs))


def simulate(jobs: Sequence[Job], nodes: Mapping[str, int], durations: Mapping[Hashable, float] | Callable[[Job], float],
             policy: str = "packed", cooldown_s: float = 0.0) -> Simulation:
    """Run the scheduler on a virtual clock with the given true durations."""
    dur = durations if callable(durations) else (lambda j: float(durations[j.key]))
    sched = Scheduler(jobs, nodes, policy, cooldown_s)
    unsched = sched.drop_impossible()
    now = 0.0
    events: list[tuple[float, int, Hashable]] = []
    seq = 0
    while not sched.finished:
        for a in sched.next_starts(now):
            seq += 1
            heapq.heappush(events, (now + dur(a.job), seq, a.job.key))
        if not events:
            t = sched.next_free_time(now)
            if t is None:  # nothing running and nothing can start
                break
            now = t
            continue
        t, _, key = heapq.heappop(events)
        now = t
        sched.finish(key, now)
        while events and events[0][0] <= now:
            _, _, k2 = heapq.heappop(events)
            sched.finish(k2, now)
    ok = [j for j in jobs if j not in unsched]
    durs = {j.key: dur(j) for j in ok}
    makespan = max((a.end or 0.0) for a in sched.done) if sched.done else 0.0
    return Simulation(makespan, lower_bound(ok, durs, len(nodes)), sched.done, unsched)
