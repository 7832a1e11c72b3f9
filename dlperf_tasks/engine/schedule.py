"""Engine step 3 for many trials on nodes held up front (``dlperf sweep``): the packing
scheduler (``dlperf_tasks.policy.scheduler``) picks disjoint free nodes, each trial runs through
:func:`dlperf_tasks.engine.trials.run_on_nodes`, retriable failures are retried, nodes that
go down are dropped, trials that cannot run any more end NOT_RUN naming why."""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Hashable

from dlperf_tasks.catalog.model import Suite
from dlperf_tasks.engine.decisions import Decisions
from dlperf_tasks.engine.progress import Display
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.engine.trials import run_local, run_on_nodes
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.remote import nodeclean
from dlperf_tasks.remote.trial import TrialWatch
from dlperf_tasks.policy.scheduler import Job, Scheduler


@dataclass
class Batch:
    """What the scheduler needs besides the trials."""

    suite: Suite
    rd: RunDir
    display: Display
    policy: str = "packed"
    cooldown_s: float = 0.0
    retries: int = 1
    poll_s: float = 0.25
    unreachable_grace_s: float = 8.0
    stop: threading.Event = field(default_factory=threading.Event)
    decisions: Decisions | None = None  # dlperf_tasks.engine.decisions.Decisions: adaptive trials, quarantine


def run_locally(todo: list[Trial], b: Batch) -> list[TrialResult]:
    """The local runtime: one trial at a time on this machine (retriable failures retried)."""
    ran = []
    queue = list(todo) if b.decisions is None else b.decisions.initial()
    while queue:
        trial = queue.pop(0)
        for attempt in range(1, b.retries + 2):
            if b.stop.is_set():
                raise KeyboardInterrupt("stop requested")
            r = run_local(trial, b.suite, b.rd, b.display, b.stop)
            b.display.finished(r, attempt)
            if not (r.status.retriable and attempt <= b.retries):
                break
        b.rd.save_trial(r)
        ran.append(r)
        if b.decisions is not None:  # adaptive trial count: the cell's next trial when still needed
            queue += b.decisions.after_trial(r)[0]
    return ran


class _Loop:
    """The state of one scheduled batch: scheduler, attempts, results."""

    def __init__(self, todo: list[Trial], b: Batch, cluster, held: list[str], pool, down: dict[str, str]):
        self.b, self.cluster, self.held, self.pool, self.down = b, cluster, held, pool, down
        self.by_id: dict[Hashable, Trial] = {t.id: t for t in todo}
        self.dec = b.decisions
        first = todo if self.dec is None else self.dec.initial()
        self.sched = Scheduler([Job.from_trial(t) for t in first],
                               {n: cluster.node(n).gpus for n in [*held, *down]}, b.policy, b.cooldown_s)
        for n in down:  # unreachable at the start: counted as down, so the reason names them
            self.sched.mark_down(n)
        self.attempts: dict[Hashable, int] = {}
        self.ran: list[TrialResult] = []
        self.skipped: list[TrialResult] = []
        self.last: dict[Hashable, TrialResult] = {}

    def drop_impossible(self) -> None:
        sched = self.sched
        for job in sched.drop_impossible():
            trial = self.by_id[job.key]
            why = (f"needs {job.nodes} node(s) with {job.gpus_per_node} GPUs; available: "
                   f"{len([n for n in self.held if n not in sched.down])} "
                   f"(down: {', '.join(sorted(sched.down)) or 'none'})")
            why += "".join(f"; {self.down[n]}" for n in sorted(sched.down) if n in self.down)
            r = self.last.get(job.key) or TrialResult(trial, TrialStatus.NOT_RUN, why)
            if job.key not in self.last:
                self.b.rd.save_trial(r)
            self.skipped.append(r)
            self.b.display.emit(f"skip   {trial.cell.id} trial {trial.index}: {why}")

    def finished(self, job: Job, nodes: list[str], fut: Future) -> None:
        try:
            r = fut.result()
        except Exception as exc:  # noqa: BLE001 - a runner bug must not kill the sweep
            r = TrialResult(self.by_id[job.key], TrialStatus.LAUNCH_FAILED,
                            f"runner error: {type(exc).__name__}: {exc}", nodes=nodes)
        self.last[job.key] = r
        self.b.display.finished(r, self.attempts[job.key])
        if r.status == TrialStatus.NODE_UNREACHABLE:
            for n in nodeclean.down(self.pool, nodes):
                self.sched.mark_down(n)
                self.b.display.emit(f"node {n} is unreachable; no further trials on it")
        if r.status.retriable and self.attempts[job.key] <= self.b.retries:
            self.sched.requeue(job)
        else:
            self.b.rd.save_trial(r)
            self.ran.append(r)
            if self.dec is not None:
                self.decide(r)
        self.drop_impossible()

    def decide(self, r: TrialResult) -> None:
        """Adaptive trial count: queue the cell's next trial if needed; quarantine suspect nodes."""
        if self.dec is None:
            return
        nxt, bad = self.dec.after_trial(r)
        for t in nxt:
            self.sched.requeue(Job.from_trial(t), front=False)
        for n in bad:
            self.sched.mark_down(n)
            self.down[n] = f"node {n} is quarantined (node health: {'; '.join(self.dec.quarantined[n])[:300]})"
            self.b.display.emit(f"node {n} quarantined: no further trials on it ({self.dec.quarantined[n][0]})")


def run_scheduled(todo: list[Trial], b: Batch, cluster, held: list[str], pool, runtime, facts,
                  down: dict[str, str] | None = None) -> tuple[list[TrialResult], list[TrialResult]]:
    """Run ``todo`` on the ``held`` nodes; returns (ran, skipped)."""
    loop = _Loop(todo, b, cluster, held, pool, down or {})
    sched = loop.sched
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, len(held))) as ex:
        running: dict[Future, tuple[Job, list[str]]] = {}
        try:
            loop.drop_impossible()
            while not sched.finished:
                if b.stop.is_set():
                    raise KeyboardInterrupt("stop requested")
                now = time.monotonic() - t0
                for a in sched.next_starts(now):
                    loop.attempts[a.job.key] = loop.attempts.get(a.job.key, 0) + 1
                    watch = TrialWatch(attempt=loop.attempts[a.job.key], poll_s=b.poll_s,
                                       unreachable_grace_s=b.unreachable_grace_s, stop_event=b.stop)
                    fut = ex.submit(run_on_nodes, cluster, a.nodes, loop.by_id[a.job.key], b.suite, b.rd, pool=pool,
                                    runtime=runtime, facts=facts, watch=watch, display=b.display)
                    running[fut] = (a.job, a.nodes)
                if not running:
                    t = sched.next_free_time(now)
                    if t is None:
                        loop.drop_impossible()
                        if not sched.running and sched.pending:  # cannot happen after drop_impossible
                            break
                        continue
                    time.sleep(max(0.0, t - now))
                    continue
                done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in done:
                    job, nodes = running.pop(fut)
                    sched.finish(job.key, time.monotonic() - t0)
                    loop.finished(job, nodes, fut)
        except BaseException:
            b.stop.set()  # running trials kill + clean up themselves
            for fut in list(running):
                try:
                    fut.result(timeout=120)
                except BaseException:  # noqa: BLE001
                    pass
            raise
    return loop.ran, loop.skipped
