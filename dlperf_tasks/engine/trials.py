"""Engine step 3 for one trial: lease its nodes (or use this machine), run it with the remote
layer's runner and watchdog (or the local runtime), gate it, write its record.

A remote trial runs in two halves with the watcher in between: :func:`start_item` (lease,
telemetry, start the detached jobs; returns plain data) and :func:`finish_item` (copy the logs,
clean the nodes, telemetry, gate, record, release the leases). :func:`run_item` runs both in
this process with :func:`dlperf_tasks.remote.jobpoll.wait` between them; a deferring trial task
runs the first half, defers to a trigger that polls with the same
:func:`~dlperf_tasks.remote.jobpoll.poll_once` (renewing the leases), and runs the second half
when it resumes, maybe on another worker. ``dlperf sweep`` runs many trials on nodes it leased
up front through :mod:`dlperf_tasks.engine.schedule`, which calls :func:`run_on_nodes` (the same
start, watcher and finish), so all record the same trial the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, cast

from dlperf_tasks.engine.errors import NonRetriable, Retriable
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.engine.runset import TrialItem
from dlperf_tasks.engine.clusterconf import load_cluster
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.frameworks import get
from dlperf_tasks.remote.local import launch_specs
from dlperf_tasks.remote import local
from dlperf_tasks.remote.runtime import make_runtime
from dlperf_tasks.engine.trialstate import telemetry_abort, telemetry_start
from dlperf_tasks.engine import slurmitem
from dlperf_tasks.engine.attempt import FINISH_LEASE_TTL_S, LeaseTerms, TaskTry
from dlperf_tasks.remote.trial import TrialWatch, start_trial
from dlperf_tasks.remote.trialdocs import TrialState, Verdict
from dlperf_tasks.engine.trialstate import telemetry_stop
from dlperf_tasks.remote.trial import finish_trial
from dlperf_tasks.remote.trial import watch_then_finish
from dlperf_tasks.engine.placement import usable_nodes
from dlperf_tasks.engine.probe import run_probe
from dlperf_tasks.remote.allocation import lease_group
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.engine.trialstate import release_leases
from dlperf_tasks.remote.allocation import renew_all
from dlperf_tasks.engine.progress import Display
from dlperf_tasks.engine.staging import trials_done
from dlperf_tasks.engine.decisions import Decisions
from dlperf_tasks.engine.storeaccess import engine_store
from dlperf_tasks.store.staging import TRIALS_DIR, Staging
from dlperf_tasks.report.result_json import trial_record
from dlperf_tasks.remote.trial import abort_trial
from dlperf_tasks.telemetry import hooks

log = logging.getLogger(__name__)
_STOP_EVENTS: dict[str, threading.Event] = {}


def _stop_key(run_id: str, trial_key: str) -> str:
    return f"{run_id}/{trial_key}"


def dry_run_commands(item: TrialItem | Mapping[str, Any], settings) -> list[str]:
    """The shell-quoted commands a trial would run on each node (shown by dry runs); on a Slurm cluster
    its ``sbatch`` line and every ``srun`` line, as they would be submitted."""
    item = TrialItem.of(item)
    trial = item.trial
    if slurmitem.is_slurm(settings):
        return slurmitem.dry_run_lines(trial, load_suite(item.suite, settings.catalog_path), item.run_id, settings,
                                       image=item.image)
    _, specs = launch_specs(trial, get(trial.cell.framework), load_suite(item.suite, settings.catalog_path).launcher)
    return [spec.shell() for _, spec in specs]


def run_local(trial: Trial, suite, rd: RunDir, display=None, stop: threading.Event | None = None) -> TrialResult:
    """Run the trial on the local runtime (this machine), with progress lines."""
    nodes = [f"local{i}" for i in range(trial.cell.topology.nodes)]
    if display:
        display.started(trial, nodes)
    tick = (lambda it: display.iteration(trial, nodes, it, trial.cell.window.total)) if display else None
    with _sampled("sampled_local", trial, rd.path):
        return local.run_trial(trial, get(suite.framework), suite.launcher, rd.path, timeout_s=suite.timeout_s,
                               hang_timeout_s=suite.hang_timeout_s, progress=tick, stop_event=stop,
                               plausible_max_per_gpu=(suite.extra or {}).get("plausible_max_per_gpu"))


def _sampled(kind: str, *args):
    """Telemetry sampling around a trial (dlperf_tasks.telemetry.hooks)."""
    return getattr(hooks, kind)(*args)


def _runtime(suite, cluster, image: str | None):
    image = cluster.resolve_image(image or (suite.container.image if suite.container else None))
    return make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher,
                        ssh_port=cluster.mpi_ssh_port)


def _watch(watch: TrialWatch | None, display) -> TrialWatch:
    """``watch`` (defaults when None) with its progress going to ``display``."""
    return dataclasses.replace(watch or TrialWatch(), progress=display.progress if display else None)


def start_on_nodes(cluster, nodes: list[str], trial: Trial, suite, rd: RunDir, *, pool, runtime, facts=None,
                   watch: TrialWatch | None = None, display=None) -> TrialState:
    """Start the trial on ``nodes`` (held by the caller): telemetry sampler, then the remote
    runner's jobs; the started trial's state (plain data, see :mod:`dlperf_tasks.remote.trial`).
    ``watch``: the attempt, time limits and unreachable grace (progress goes to ``display``)."""
    facts = facts if facts is not None else rd.load_facts(nodes)
    # a multi-node cell: the interconnect probe on the same nodes and image first (engine/probe.py)
    probe = run_probe(cluster, nodes, trial, suite, rd, pool=pool, runtime=runtime, facts=facts,
                      stop_event=(watch or TrialWatch()).stop_event)
    # telemetry; the image's MOFED is compared with the host's (docker runtime only)
    tele = telemetry_start(pool, nodes, trial, getattr(runtime, "image", None))
    try:
        state = start_trial(cluster, nodes, trial, suite, rd.run_id, pool=pool, runtime=runtime,
                            facts=facts, watch=_watch(watch, display))
    except BaseException:
        telemetry_abort(pool, tele)
        raise
    state["telemetry"] = tele
    if probe is not None:
        state["interconnect"] = probe
    return state


def finish_on_nodes(cluster, state: TrialState, verdict: Verdict | None, suite, rd: RunDir, *, pool, runtime,
                    display=None, watch: TrialWatch | None = None) -> TrialResult:
    """Finish a started trial (this process or another one): the runner's finish, then telemetry."""
    try:
        res = finish_trial(cluster, state, verdict, suite, rd.path, pool=pool, runtime=runtime,
                           watch=_watch(watch, display))
        res.interconnect = state.get("interconnect")
        return res
    finally:
        telemetry_stop(pool, state.get("telemetry"), Trial.from_dict(state["trial"]), rd.path)


def run_on_nodes(cluster, nodes: list[str], trial: Trial, suite, rd: RunDir, *, pool, runtime, facts=None,
                 watch: TrialWatch | None = None, display=None) -> TrialResult:
    """Run the trial on ``nodes`` (held by the caller) in this process: start, watch, finish.
    ``watch``: the attempt, poll interval, unreachable grace and the stop event."""
    w = watch or TrialWatch()
    state = start_on_nodes(cluster, nodes, trial, suite, rd, pool=pool, runtime=runtime, facts=facts,
                           watch=w, display=display)
    return _watch_and_finish(pool, state, w.poll_s, w.stop_event, display, lambda verdict: finish_on_nodes(
        cluster, state, verdict, suite, rd, pool=pool, runtime=runtime, display=display))


def _watch_and_finish(pool, state: TrialState, poll_s: float, stop, display, finish: Callable) -> Any:
    return watch_then_finish(pool, state, poll_s, stop, display.progress if display else None, finish)


def start_leased(trial: Trial, suite, rd: RunDir, settings, *, image: str | None, attempt: int, display=None,
                 lease: LeaseTerms | None = None, pool=None) -> TrialState | TrialResult:
    """Lease ``topology.nodes`` free nodes (waiting up to the retry policy's lease wait) and start
    the trial there. Returns its state (``leases`` and ``image`` added; the watch renews the leases
    to ``lease.ttl_s``), or the result when no nodes could be had. A stop ends the wait.
    ``pool``: the caller's (it goes on to watch the trial), else one of its own for the start.
    ``lease``: :class:`LeaseTerms` (with ``busy_returns`` the caller waits elsewhere, e.g. a
    deferred task without a worker slot, and calls again)."""
    lease = lease or LeaseTerms()
    cluster = pool.cluster if pool is not None else load_cluster(settings)
    topo = trial.cell.topology
    fits = usable_nodes(cluster, trial, rd, settings)  # A/B: pinned nodes; else not quarantined, spread
    if len(fits) < topo.nodes:
        raise NonRetriable(f"trial {trial.id}: cluster {cluster.name} has no {topo.nodes} nodes with "
                           f"{topo.gpus_per_node} GPUs")
    # a fresh event per attempt: one left set by an earlier run's cleanup (a cleared DAG run keeps
    # its run id) must not stop this one before it starts
    stop = _STOP_EVENTS[_stop_key(rd.run_id, trial.key)] = threading.Event()
    runtime = _runtime(suite, cluster, image)
    with (contextlib.nullcontext(pool) if pool is not None else SSHPool(cluster)) as pool:
        wait_s = settings.lease_wait_s if lease.wait_s is None else lease.wait_s
        held = lease_group(pool, fits, topo.nodes, rd.run_id, wait_s=wait_s, stop=stop)
        if isinstance(held, str):
            if lease.busy_returns and not stop.is_set():
                return {"waiting": held}
            status = TrialStatus.NOT_RUN if stop.is_set() else TrialStatus.NODE_UNREACHABLE
            return TrialResult(trial=trial, status=status, reason=held)
        try:  # the leases renew themselves while the trial starts (an image pull can outlast their TTL)
            state = start_on_nodes(cluster, [n for h in held for n in h.nodes], trial, suite, rd, pool=pool,
                                   runtime=runtime, watch=TrialWatch(attempt=attempt), display=display)
        except BaseException:
            for h in held:
                h.release()
            raise
        leases = [x.to_doc() for h in held for x in h.detach()]  # from here the watch renews them
    state["leases"], state["image"] = leases, image
    watch = state.get("watch")
    if watch:
        watch.update(leases=leases, lease_ttl_s=float(lease.ttl_s), renewed_at=0.0)
    return state


def finish_leased(state: TrialState, verdict: Verdict | None, suite, rd: RunDir, settings, *, display=None,
                  pool=None) -> TrialResult:
    """Finish a trial :func:`start_leased` started (any process, any host): collect, clean, gate,
    release its leases."""
    cluster = load_cluster(settings)
    own = pool is None
    pool = pool or SSHPool(cluster)
    try:
        # a deferred trial's leases (renewed to the trigger's long TTL) back to the in-process TTL: a
        # worker dying while it collects frees the nodes for the retry soon, not after the long TTL
        if (state.get("watch") or {}).get("lease_ttl_s", 0) > FINISH_LEASE_TTL_S:
            renew_all(pool, state.get("leases"), FINISH_LEASE_TTL_S)
        return finish_on_nodes(cluster, state, verdict, suite, rd, pool=pool,
                               runtime=_runtime(suite, cluster, state.get("image")), display=display)
    finally:
        release_leases(pool, state.get("leases"))
        if own:
            pool.close()


def display_for(item: TrialItem | Mapping[str, Any], log: Callable[[str], None] | None, settings):
    """The progress display of one planned trial run as its own task: ``[done/planned]`` over
    the whole DAG run (the plan's ``planned`` / ``planned_runs``; done = the trial records staged
    by every task of it, this one included), else over this trial alone."""
    item = TrialItem.of(item)
    planned = item.planned
    if planned is None or planned < 1:
        return Display(log, 1)
    runs = list(item.planned_runs or [item.run_id])

    def count(key: str) -> int:
        return trials_done(settings, runs, (item.run_id, key))

    return Display(log, planned, count_done=count)


def before_trial(item: TrialItem | Mapping[str, Any], trial: Trial, suite, rd: RunDir, settings) -> TrialResult | None:
    """The decisions' hook before a trial of a DAG run (:meth:`Decisions.before_trial`): its
    SKIPPED record when the adaptive rule stopped its cell, else None. The cell's earlier records
    come from the run's staging area first (no shared disk between the trial tasks)."""
    def fetch(trials: list[Trial]) -> None:
        Staging(engine_store(settings), rd.run_id).pull(rd.path, only=[f"{TRIALS_DIR}/{t.key}.json" for t in trials])

    return Decisions.from_run_dir(rd, suite).before_trial(trial, fetch=fetch)


def start_item(item: TrialItem | Mapping[str, Any], settings, attempt: TaskTry | None = None, *,
               lease: LeaseTerms | None = None, display=None, pool=None) -> dict[str, Any]:
    """The first half of one planned trial: ``{"record": ...}`` when it is done already (dry run,
    a valid record in the run dir: ``reused``, the local runtime runs it whole here), else
    ``{"started": state}`` (remote jobs running, nodes leased; :func:`finish_item` ends it), or
    with ``lease.busy_returns`` ``{"waiting": reason}`` when no nodes were free within
    ``lease.wait_s`` (nothing recorded; see :func:`start_leased`). ``attempt``: :class:`TaskTry`."""
    attempt = attempt or TaskTry()
    item = TrialItem.of(item)
    trial = item.trial
    if item.dry_run:
        res = TrialResult(trial=trial, status=TrialStatus.NOT_RUN, reason="dry run")
        return {"record": {**trial_record(res), "commands": dry_run_commands(item, settings)}}
    rd = RunDir(Path(item.run_dir), item.run_id)
    done = rd.reusable(trial)
    if done is not None:  # a re-run of the scheduled run: this trial already has a valid result
        return {"record": {**trial_record(done), "reused": True}}
    suite = load_suite(item.suite, settings.catalog_path)
    if (skip := before_trial(item, trial, suite, rd, settings)) is not None:  # the cell's median is known
        return {"record": trial_record(skip)}
    display = display or display_for(item, attempt.log, settings)
    if settings.is_local:
        return {"record": _record(item, rd, run_local(trial, suite, rd, display), display, attempt)}
    if slurmitem.is_slurm(settings):  # a Slurm job: the scheduler places it, no lease
        # a fresh stop event, as for a leased trial; a kill from here on sets it and the watcher sees it
        _STOP_EVENTS[_stop_key(rd.run_id, trial.key)] = threading.Event()
        return {"started": slurmitem.start(trial, suite, rd, settings, image=item.image, attempt=attempt.number,
                                           emit=display.emit)}
    try:
        got = start_leased(trial, suite, rd, settings, image=item.image, attempt=attempt.number,
                           display=display, lease=lease, pool=pool)
    finally:
        _STOP_EVENTS.pop(_stop_key(rd.run_id, trial.key), None)
    if isinstance(got, TrialResult):
        return {"record": _record(item, rd, got, display, attempt)}
    if "waiting" in got:
        return {"waiting": got["waiting"]}
    return {"started": got}


def finish_item(item: TrialItem | Mapping[str, Any], settings, state: TrialState,
                verdict: Verdict | Mapping[str, Any] | None,
                attempt: TaskTry | None = None, *, pool=None, display=None) -> dict[str, Any]:
    """The second half of :func:`start_item` (verdict: the watcher's, or a Slurm job's end event);
    writes and returns the record."""
    item = TrialItem.of(item)
    attempt = attempt or TaskTry()
    rd = RunDir(Path(item.run_dir), item.run_id)
    display = display or display_for(item, attempt.log, settings)
    if "slurm" in state:
        res = slurmitem.finish(state, dict(verdict or {}), rd, settings, display.emit)
    else:
        res = finish_leased(state, cast("Verdict | None", verdict), load_suite(item.suite, settings.catalog_path), rd, settings,
                            display=display, pool=pool)
    return _record(item, rd, res, display, attempt)


def _record(item: TrialItem, rd: RunDir, res: TrialResult, display, attempt: TaskTry) -> dict[str, Any]:
    """Save the trial's record; raise Retriable while tries remain for a retriable status,
    NonRetriable for a failed trial under policy fail_fast."""
    out = rd.save_trial(res)
    display.finished(res, attempt.number)
    if res.status.retriable and attempt.number < attempt.of:
        raise Retriable(f"trial {res.trial.id}: {res.status.value}: {res.reason} "
                        f"(try {attempt.number} of {attempt.of})")
    if res.status != TrialStatus.OK and item.policy == "fail_fast":
        raise NonRetriable(f"trial {res.trial.id}: {res.status.value}: {res.reason} (policy fail_fast)")
    return out


def run_item(item: TrialItem | Mapping[str, Any], settings, attempt: TaskTry | None = None, *,
             poll_s: float = 0.5) -> dict[str, Any]:
    """One planned trial, whole, in this process (:func:`start_item`, the watcher, :func:`finish_item`:
    the same halves a deferred task runs, with the trigger's poll rules in between); its record."""
    attempt = attempt or TaskTry()
    item = TrialItem.of(item)
    display = display_for(item, attempt.log, settings)
    if slurmitem.is_slurm(settings):
        return _run_slurm_item(item, settings, attempt, display, poll_s)
    # one SSH pool (connections made when first used) for the start, the watch and the finish
    with (contextlib.nullcontext() if settings.is_local else SSHPool(load_cluster(settings))) as pool:
        got = start_item(item, settings, attempt, display=display, pool=pool)
        if "record" in got:
            return got["record"]
        state = got["started"]
        key = _stop_key(item.run_id, item.key)
        stop = _STOP_EVENTS[key] = threading.Event()  # fresh, as in start_leased
        try:
            return _watch_and_finish(pool, state, poll_s, stop, display, lambda verdict: finish_item(
                item, settings, state, verdict, attempt, pool=pool, display=display))
        finally:
            _STOP_EVENTS.pop(key, None)


def _run_slurm_item(item: TrialItem, settings, attempt: TaskTry, display, poll_s: float) -> dict[str, Any]:
    """A trial on a Slurm cluster, not deferred: submit, watch the job here (a stop cancels it), finish."""
    key = _stop_key(item.run_id, item.key)
    try:
        got = start_item(item, settings, attempt, display=display)
        if "record" in got:
            return got["record"]
        state = got["started"]
        stop = _STOP_EVENTS.setdefault(key, threading.Event())  # start_item's (a kill since then set it)
        event = slurmitem.wait(state, settings, poll_s=max(poll_s, 1.0), stop=stop, emit=display.emit)
        return finish_item(item, settings, state, event, attempt, display=display)
    finally:
        _STOP_EVENTS.pop(key, None)


def stop_event(run_id: str, trial_key: str, forget: bool = False) -> threading.Event:
    """The stop event :func:`stop_trial` sets for this trial in this process (a watcher running
    here, e.g. a trigger run inline by a test harness, checks it); ``forget`` unregisters it."""
    key = _stop_key(run_id, trial_key)
    if forget:
        return _STOP_EVENTS.pop(key, None) or threading.Event()
    return _STOP_EVENTS.setdefault(key, threading.Event())


def stop_trial(item: TrialItem | Mapping[str, Any], settings) -> None:
    """Stop a running trial (task killed / run cancelled): kill its process groups or remote jobs."""
    item = TrialItem.of(item)
    trial = item.trial
    if settings.is_local:
        local.stop(trial.key)
        return
    # the running remote trial stops, kills its jobs and cleans its nodes; a watcher that starts only
    # after this (the trigger of a task killed between its start and its deferral) finds the event set
    _STOP_EVENTS.setdefault(_stop_key(item.run_id, trial.key), threading.Event()).set()
    try:  # a Slurm job goes now, submitted or queued, whoever watches it
        if slurmitem.is_slurm(settings):
            slurmitem.cancel_trial_jobs(settings, item.run_id, trial.key)
    except (RemoteError, Retriable, NonRetriable, OSError) as exc:  # the watcher and the run's cleanup scancel too
        log.warning("trial %s: scancel of its Slurm job failed: %s", trial.id, exc)


def stop_runs(run_ids: set[str]) -> None:
    for key, event in list(_STOP_EVENTS.items()):
        if key.split("/", 1)[0] in run_ids:
            event.set()


def abort_started(state: TrialState, cluster, pool=None) -> list[str]:
    """Stop a started trial nobody will finish (its deferred task was killed): its jobs and
    telemetry loops killed, job directories and containers removed, leases released. Notes."""
    own = pool is None
    pool = pool or SSHPool(cluster)
    try:
        notes = abort_trial(cluster, state, pool)
        telemetry_abort(pool, state.get("telemetry"))
    finally:
        release_leases(pool, state.get("leases"))
        if own:
            pool.close()
    return notes
