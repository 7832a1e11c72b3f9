"""Run one trial on N nodes: start, watch, kill, cleanup, collect, gate; in two halves.

:func:`start_trial` starts the trial's part on every node at once as a detached job
(:mod:`dlperf_tasks.remote.jobs`) and returns a serializable state (the jobs as a
:class:`~dlperf_tasks.remote.jobpoll.JobsWatch`). The jobs are then watched by
:func:`dlperf_tasks.remote.jobpoll.poll_once` (in this process: :func:`run_trial` calls
:func:`~dlperf_tasks.remote.jobpoll.wait`; for a deferred task a trigger polls it elsewhere),
whose verdict stops the trial on

* wall-clock timeout (``suite.timeout_s``)                  -> ``TIMEOUT``
* no new iteration line for ``suite.hang_timeout_s``         -> ``HANG``
  (an iteration line = what the framework's parser counts; on the metrics nodes' logs)
* a node that stays unreachable for ``unreachable_grace_s`` -> ``NODE_UNREACHABLE`` (names it)
* a node exiting non-zero while others still run           -> ``NONZERO_EXIT``

:func:`finish_trial` (given the state and the verdict, in any process that can reach the nodes)
kills every job's process group, copies every node's log to ``out_dir`` at
``Framework.log_relpath(trial, node_rank)`` (the seeds' layout; read in bounded chunks and
parsed incrementally), removes the trial's containers on EVERY node and checks that the nodes
are idle again (no labelled container, no process carrying the trial's ``DLPERF_TRIAL``). The logs
are then parsed and gated by :func:`dlperf_tasks.measure.extract.gate_run_logs` (``OK`` or ``INVALID_LOG``).
:func:`abort_trial` is the cleanup of a trial nobody will finish (a deferred task killed).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks import frameworks
from dlperf_tasks.core.errors import DlperfError, RemoteError
from dlperf_tasks.frameworks.preflight import LaunchGuardError
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.remote import jobpoll
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.trialdocs import TrialState, Verdict
from dlperf_tasks.remote.runtime import (DigestMismatch, DockerRuntime, HostRuntime, NodeFacts, make_runtime,
                                         safe_name)
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.remote.trialnodes import (LAUNCH_EXIT_CODES, VANISHED, LaunchError, NodeRun, cleanup, collect,
                                            parallel, start_mpi_helper, start_node_job)
from dlperf_tasks.remote.trialcmd import helper_prelude, node_run_dir, trial_commands
from dlperf_tasks.remote.watch import NodeLog, progress_state
from dlperf_tasks.remote.runtime import remove_containers_command
from dlperf_tasks.measure.extract import gate_run_logs

log = logging.getLogger(__name__)
__all__ = ["Progress", "TrialWatch", "run_trial", "start_trial", "finish_trial", "abort_trial", "LAUNCH_EXIT_CODES", "VANISHED"]


@dataclass
class Progress:
    """What the live display shows for a running trial."""

    trial: Trial
    nodes: list[str]
    iteration: int = 0
    total: int = 0
    state: str = "starting"


class _Stopped(Exception):
    pass


#: the verdict of a trial stopped by request (interrupt, SIGTERM, a killed task)
STOPPED: Verdict = {"status": "stopped", "exit_codes": {}, "reason": "stopped by request (SIGTERM/interrupt)"}


class _TrialRun:
    """One trial's nodes, jobs and logs (either half: :func:`start_trial` / :func:`finish_trial`)."""

    def __init__(self, cluster: Cluster, node_names: list[str], trial: Trial, suite, run_id: str, out: Path | None,
                 pool: SSHPool, runtime: HostRuntime, attempt: int, progress):
        self.fw = frameworks.get(trial.cell.framework)
        self.trial, self.suite, self.run_id, self.out = trial, suite, run_id, out
        self.pool, self.runtime, self.attempt, self.progress = pool, runtime, attempt, progress
        self.node_names = list(node_names)
        self.nodes = [cluster.node(n) for n in node_names]
        self.runs = [NodeRun(i, n.name) for i, n in enumerate(self.nodes)]
        self.prog = Progress(trial, list(node_names), total=trial.cell.window.total)
        self.tag = safe_name(f"{run_id}_{trial.key}_a{attempt}", 100)
        self.metric_ranks = [r for r in self.fw.metrics_nodes(trial.cell) if r < len(self.runs)] or [0]
        self.mpi = self.fw.launch_mode == "mpi"
        self.multi_mpi = self.mpi and isinstance(runtime, DockerRuntime) and len(self.nodes) > 1
        self.commands: dict[int, object] = {}
        self.prelude: list[str] = []
        self.notes: list[str] = []

    def report(self, state: str, iteration: int | None = None) -> None:
        self.prog.state = state
        if iteration is not None:
            self.prog.iteration = iteration
        if self.progress:
            try:
                self.progress(self.prog)
            except Exception:  # noqa: BLE001 - a display must never break a trial
                pass

    def run_dir(self, r: int) -> str:
        return node_run_dir(self.nodes[r], self.run_id)

    def build_commands(self, facts: Mapping[str, NodeFacts]) -> None:
        """Every node's job command, before anything starts (bad settings = LAUNCH_FAILED)."""
        self.commands = trial_commands(self.nodes, self.trial, self.suite, self.run_id, self.runtime, facts,
                                       attempt=self.attempt)
        self.prelude = helper_prelude(self.trial, self.suite, [n.node_spec() for n in self.nodes])

    def start(self, facts: Mapping[str, NodeFacts]) -> None:
        self.report("starting")
        if self.multi_mpi:
            parallel([lambda i=i: start_mpi_helper(
                self.pool, self.runtime, self.nodes[i], self.run_dir(i), f"{self.run_dir(i)}/{self.tag}",
                trial=self.trial, run_id=self.run_id, facts=facts[self.nodes[i].name], attempt=self.attempt,
                prelude=self.prelude) for i in range(len(self.nodes))])

        def one(r: int) -> None:
            nr = self.runs[r]
            start_node_job(self.pool, nr, self.commands[r], f"{self.tag}_{nr.name}", self.nodes[r].workdir,
                           self.run_dir(r))

        parallel([lambda r=r: one(r) for r in self.commands])

    def watch(self, timeout_s: float, hang_s: float, grace_s: float, started: float) -> jobpoll.JobsWatch:
        metric_nodes = [self.runs[r].name for r in self.metric_ranks]
        w = jobpoll.JobsWatch.of([nr.job for nr in self.runs if nr.job is not None], timeout_s, hang_s,
                                 framework=self.fw.name, progress_nodes=metric_nodes, grace_s=grace_s)
        w.started = started
        return w

    def open_logs(self) -> None:
        for nr in self.runs:
            if nr.job is not None:
                state = progress_state(self.fw) if nr.rank in self.metric_ranks else None
                nr.log = NodeLog(self.out / self.fw.log_relpath(self.trial, nr.rank), state)

    def max_iteration(self) -> int:
        return max((self.runs[r].log.max_iteration for r in self.metric_ranks if self.runs[r].log), default=0)

    def apply(self, verdict: Mapping[str, Any]) -> tuple[TrialStatus | None, str]:
        """The watcher's verdict as the trial's runtime status (exit codes and lost nodes noted)."""
        kind = verdict.get("status")
        codes = verdict.get("exit_codes") or {}
        for nr in self.runs:
            if nr.job is not None and nr.exit_code is None:
                nr.exit_code = codes.get(nr.name)
            if kind == "vanished" and nr.name in (verdict.get("nodes") or []):
                nr.exit_code = VANISHED
            if kind == "unreachable" and nr.name in (verdict.get("nodes") or []):
                nr.unreachable, nr.last_error = True, verdict.get("reason", "")
        failed = [nr for nr in self.runs if nr.exit_code not in (None, 0)]
        if kind == "unreachable":
            return TrialStatus.NODE_UNREACHABLE, verdict.get("reason", "")
        if kind in ("exited", "vanished"):
            return (TrialStatus.NONZERO_EXIT, "; ".join(nr.exit_text() for nr in failed)) if failed else (None, "")
        if kind == "timeout":
            return TrialStatus.TIMEOUT, verdict.get("reason", "")
        if kind == "hang":
            return TrialStatus.HANG, verdict.get("reason", "")
        if kind == "stopped":
            return TrialStatus.NOT_RUN, verdict.get("reason", "")
        raise DlperfError(f"trial {self.trial.id}: unknown watcher verdict {kind!r}")

    def finish(self, kill_grace_s: float) -> None:
        self.report("cleanup")
        self.open_logs()
        cleanup(self.pool, self.runtime, self.runs, self.run_id, self.trial, kill_grace_s, self.notes)
        collect(self.pool, self.runs, self.notes)

    def gate(self, status: TrialStatus | None, reason: str, started: float,
             gpu_models: Mapping[str, str | None] | None = None) -> TrialResult:
        launch_failed = [nr for nr in self.runs if nr.exit_code in LAUNCH_EXIT_CODES or nr.exit_code == VANISHED]
        if launch_failed and status in (None, TrialStatus.NONZERO_EXIT) and self.max_iteration() == 0:
            status = TrialStatus.LAUNCH_FAILED
            reason = "; ".join(nr.exit_text() for nr in launch_failed)
            first = launch_failed[0].log
            tail = first.tail(400).decode(errors="replace").strip() if first is not None else ""
            if tail:
                reason += f": {tail}"
        exit_codes = {nr.name: (None if nr.exit_code == VANISHED else nr.exit_code)
                      for nr in self.runs if nr.job is not None or nr.rank in self.commands}
        if status == TrialStatus.NONZERO_EXIT and not any(nr.exit_code == VANISHED for nr in self.runs):
            runtime_status, runtime_reason = None, ""  # the gate names the non-zero exit codes itself
        else:
            runtime_status, runtime_reason = status, reason
        result = gate_run_logs(self.trial, self.out, exit_codes=exit_codes, runtime_status=runtime_status,
                               runtime_reason=runtime_reason, nodes=self.node_names, started_at=started,
                               finished_at=time.time(), gpu_models=gpu_models,
                               plausible_max_per_gpu=(getattr(self.suite, "extra", None) or {}).get(
                                   "plausible_max_per_gpu"))
        if status == TrialStatus.NONZERO_EXIT and result.status == TrialStatus.OK:  # pragma: no cover - defensive
            result.status, result.reason = status, reason
        if self.notes:
            result.reason = "; ".join([result.reason, *self.notes] if result.reason else self.notes)
        self.report(result.status.value)
        return result


def _check_nodes(cluster: Cluster, node_names: list[str], trial: Trial) -> None:
    topo = trial.cell.topology
    if len(node_names) != topo.nodes:
        raise DlperfError(f"trial {trial.id} needs {topo.nodes} node(s), got {len(node_names)}: {node_names}")
    for n in node_names:
        if cluster.node(n).gpus < topo.gpus_per_node:
            raise DlperfError(f"trial {trial.id} needs {topo.gpus_per_node} GPUs per node; node {n} has "
                              f"{cluster.node(n).gpus}")


def start_trial(cluster: Cluster, node_names: list[str], trial: Trial, suite, run_id: str, *, pool: SSHPool,
                runtime: HostRuntime, facts: Mapping[str, NodeFacts] | None = None,
                watch: TrialWatch | None = None) -> TrialState:
    """Start ``trial`` on ``node_names`` (node rank order); returns its :class:`TrialState` (plain
    data). ``failed`` when it could not start; ``watch`` is None when nothing started. ``watch``
    (:class:`TrialWatch`): the attempt, time limits, unreachable grace and progress."""
    _check_nodes(cluster, node_names, trial)
    w = watch or TrialWatch()
    timeout_s = float(w.timeout_s if w.timeout_s is not None else suite.timeout_s)
    hang_timeout_s = float(w.hang_timeout_s if w.hang_timeout_s is not None else suite.hang_timeout_s)
    unreachable_grace_s = w.unreachable_grace_s
    tr = _TrialRun(cluster, node_names, trial, suite, run_id, None, pool, runtime, w.attempt, w.progress)
    state: TrialState = {"trial": trial.to_dict(), "run_id": run_id, "nodes": list(node_names),
                         "attempt": w.attempt, "started": time.time(), "ranks": [], "watch": None,
                         "failed": None, "unreachable": []}
    try:
        if facts is None:
            facts = HostRuntime.prepare(runtime, pool, list(node_names))
        try:
            runtime.verify_digest(pool, list(node_names), facts)  # the image each node holds now
        finally:
            state["node_env"] = node_env(facts, node_names)
        tr.build_commands(facts)
    except DigestMismatch as exc:  # another image than the catalog pins: refused, nothing started
        state["failed"] = {"status": TrialStatus.LAUNCH_FAILED.value, "reason": str(exc)}
    except RemoteError as exc:
        state["failed"] = {"status": TrialStatus.NODE_UNREACHABLE.value, "reason": str(exc)}
    except LaunchGuardError as exc:  # the command would not train the cell: refused before any GPU time
        state["failed"] = {"status": TrialStatus.LAUNCH_FAILED.value, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a framework's launch() rejecting the settings
        state["failed"] = {"status": TrialStatus.LAUNCH_FAILED.value,
                           "reason": f"building the launch command failed: {type(exc).__name__}: {exc}"}
    if state["failed"]:
        return state
    state["ranks"] = sorted(tr.commands)
    try:
        tr.start(facts)
    except LaunchError as exc:
        state["failed"] = {"status": TrialStatus.LAUNCH_FAILED.value, "reason": str(exc)}
    except RemoteError as exc:
        state["failed"] = {"status": TrialStatus.NODE_UNREACHABLE.value,
                           "reason": str(exc) if exc.node else f"SSH failure: {exc}"}
        state["unreachable"] = [exc.node] if exc.node else []
    except BaseException:  # interrupted while starting: stop what started, then re-raise
        state["watch"] = tr.watch(timeout_s, hang_timeout_s, unreachable_grace_s, state["started"]).to_dict()
        abort_trial(cluster, state, pool)
        raise
    state["watch"] = tr.watch(timeout_s, hang_timeout_s, unreachable_grace_s, state["started"]).to_dict()
    return state


def node_env(facts: Mapping[str, NodeFacts], node_names: list[str]) -> dict[str, dict[str, str | None]]:
    """What each node of the trial runs it with (its record's ``node_env``): the GPU model
    nvidia-smi named there and the image digest the node holds."""
    return {n: {"gpu_model": getattr(facts.get(n), "gpu_model", None),
                "image_digest": getattr(facts.get(n), "image_digest", None)} for n in node_names}


def _resume(cluster: Cluster, state: TrialState, suite, out_dir, pool, runtime, progress) -> _TrialRun:
    trial = Trial.from_dict(state["trial"])
    tr = _TrialRun(cluster, state["nodes"], trial, suite, state["run_id"], Path(out_dir), pool, runtime,
                   int(state["attempt"]), progress)
    tr.commands = {int(r): None for r in state.get("ranks") or []}
    jobs = {j.node: j for j in jobpoll.JobsWatch.from_dict(state["watch"]).remote_jobs()} if state.get("watch") \
        else {}
    for nr in tr.runs:
        nr.job = jobs.get(nr.name)
        nr.unreachable = nr.name in (state.get("unreachable") or [])
    return tr


def finish_trial(cluster: Cluster, state: TrialState, verdict: Verdict | None, suite,
                 out_dir: str | os.PathLike, *, pool: SSHPool, runtime: HostRuntime,
                 watch: TrialWatch | None = None) -> TrialResult:
    """The second half: stop what still runs, copy the logs to ``out_dir``, clean the nodes, gate.
    ``verdict``: what :func:`~dlperf_tasks.remote.jobpoll.poll_once` said (None: the start failed).
    ``watch``: the kill's grace and where progress goes."""
    w = watch or TrialWatch()
    kill_grace_s, progress = w.kill_grace_s, w.progress
    trial = Trial.from_dict(state["trial"])
    failed = state.get("failed")
    env = dict(state.get("node_env") or {})
    if failed and not (state.get("watch") or {}).get("jobs") and not state.get("ranks"):
        return TrialResult(trial=trial, status=TrialStatus(failed["status"]), reason=failed["reason"],
                           nodes=list(state["nodes"]), started_at=state["started"], finished_at=time.time(),
                           node_env=env)
    tr = _resume(cluster, state, suite, out_dir, pool, runtime, progress)
    if failed:
        status, reason = TrialStatus(failed["status"]), failed["reason"]
    else:
        status, reason = tr.apply(verdict or {"status": "stopped", "reason": "no verdict"})
    tr.finish(kill_grace_s)
    if status == TrialStatus.NOT_RUN:
        raise _Stopped(reason)
    res = tr.gate(status, reason, state["started"], {n: e.get("gpu_model") for n, e in env.items()})
    res.node_env = env
    lost = jobpoll.lost_lease_reason((verdict or {}).get("watch") or state.get("watch"))  # trigger's, or ours
    if lost and res.status == TrialStatus.OK:
        res.status, res.reason = TrialStatus.INVALID_LOG, lost
    return res


def abort_trial(cluster: Cluster, state: TrialState, pool: SSHPool, kill_grace_s: float = 5.0) -> list[str]:
    """Stop a started trial nobody will finish (its task was killed while deferred): kill its jobs,
    remove its job directories and its containers on every node. Returns notes (nodes not clean)."""
    notes: list[str] = []
    if state.get("watch"):
        w = jobpoll.JobsWatch.from_dict(state["watch"])
        notes += [f"node {n}: job would not stop" for n in jobpoll.stop_jobs(pool, w, kill_grace_s)]
    trial = Trial.from_dict(state["trial"])

    def one(node: str) -> None:
        try:
            pool.run(node, remove_containers_command(state["run_id"], trial.key, node), timeout=60)
        except RemoteError as exc:
            notes.append(f"node {node}: cleanup failed: {exc}")

    parallel([lambda n=n: one(n) for n in state["nodes"]])
    return notes


@dataclass
class TrialWatch:
    """How one in-process trial is watched: its attempt number, poll interval, time limits (None: the
    suite's), how long a node may be unreachable, the kill's grace, where progress goes, and an event
    that, set from outside (a SIGTERM handler), stops the trial like a kill."""

    attempt: int = 1
    poll_s: float = 0.25
    timeout_s: float | None = None
    hang_timeout_s: float | None = None
    unreachable_grace_s: float = 8.0
    kill_grace_s: float = 5.0
    progress: Callable[[Progress], None] | None = None
    stop_event: threading.Event | None = None


def run_trial(cluster: Cluster, node_names: list[str], trial: Trial, suite, run_id: str, out_dir: str | os.PathLike,
              *, pool: SSHPool | None = None, runtime: HostRuntime | None = None,
              facts: Mapping[str, NodeFacts] | None = None, watch: TrialWatch | None = None) -> TrialResult:
    """Run ``trial`` on ``node_names`` in this process: :func:`start_trial`, the watcher's
    :func:`~dlperf_tasks.remote.jobpoll.wait`, :func:`finish_trial`; the gated result.

    ``out_dir`` receives the logs. ``pool``/``runtime``/``facts`` come from the sweep's
    preparation; when omitted they are created here (host runtime facts probed). ``watch``: see
    :class:`TrialWatch` (its defaults when None).
    """
    w = watch or TrialWatch()
    own_pool = pool is None
    pool = pool or SSHPool(cluster)
    runtime = runtime or make_runtime(suite.container, registry=cluster.registry, launcher=suite.launcher,
                                      ssh_port=cluster.mpi_ssh_port)
    try:
        state = start_trial(cluster, node_names, trial, suite, run_id, pool=pool, runtime=runtime, facts=facts,
                            watch=w)
        return watch_then_finish(pool, state, w.poll_s, w.stop_event, w.progress, lambda verdict: finish_trial(
            cluster, state, verdict, suite, out_dir, pool=pool, runtime=runtime, watch=w))
    finally:
        if own_pool:
            pool.close()


def watch_then_finish(pool: SSHPool, state: TrialState, poll_s: float, stop_event: threading.Event | None,
                      progress: Callable[[Progress], None] | None, finish: Callable[[Any], Any]) -> Any:
    """The in-process watcher between start and ``finish(verdict)`` (a deferred task's trigger
    runs the same poll rules); an interrupt (KeyboardInterrupt, SIGTERM) still finishes the
    trial (kill, clean, collect) before it propagates."""
    try:
        verdict = wait_trial(pool, state, poll_s, stop_event, progress)
    except BaseException:
        try:
            finish(STOPPED)
        except _Stopped:
            pass
        raise
    return finish(verdict)


def wait_trial(pool: SSHPool, state: TrialState, poll_s: float, stop_event: threading.Event | None = None,
               progress: Callable[[Progress], None] | None = None) -> Verdict | None:
    """Watch a started trial in this process until the verdict (``state["watch"]`` kept up to date;
    an interrupt stops it like a kill: the nodes are cleaned by whoever catches it)."""
    if state.get("failed") or not state.get("watch"):
        return None
    w = jobpoll.JobsWatch.from_dict(state["watch"])
    trial = Trial.from_dict(state["trial"])
    prog = Progress(trial, list(state["nodes"]), total=trial.cell.window.total, state="running")

    def tick(it: int) -> None:
        prog.iteration = it
        if progress:
            try:
                progress(prog)
            except Exception:  # noqa: BLE001 - a display must never break a trial
                pass

    try:
        tick(0)
        return jobpoll.wait(pool, w, poll_s, stop=stop_event.is_set if stop_event else None, tick=tick)
    finally:
        state["watch"] = w.to_dict()
