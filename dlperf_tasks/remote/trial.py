"""Run one trial on N nodes: start, stream logs, watchdogs, kill, cleanup, collect, gate.

:func:`run_trial` starts the trial's part on every node at once as a detached job
(:mod:`dlperf_tasks.remote.jobs`), reads every node's log by offset while it runs and
stops it on

* wall-clock timeout (``suite.timeout_s``)                  -> ``TIMEOUT``
* no new iteration line for ``suite.hang_timeout_s``         -> ``HANG``
  (an iteration line = what the framework's parser counts in ``facts.iterations_seen``)
* a node that stays unreachable for ``unreachable_grace_s`` -> ``NODE_UNREACHABLE`` (names it)
* a node exiting non-zero while others still run           -> ``NONZERO_EXIT``

Whatever happens (also KeyboardInterrupt / SIGTERM turned into an exception by the
caller) the ``finally`` block kills every job's process group, removes the trial's
containers on EVERY node, copies the logs into ``out_dir`` at
``Framework.log_relpath(trial, node_rank)`` (the seeds' layout), and checks that the nodes
are idle again (no labelled container, no process carrying the trial's ``DLPERF_TRIAL``).
The logs are then parsed and gated by :func:`dlperf_tasks.extract.gate_run_logs`
(``OK`` or ``INVALID_LOG``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks import frameworks
from dlperf_tasks.errors import DlperfError, RemoteError
from dlperf_tasks.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.remote import jobs
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import DockerRuntime, HostRuntime, NodeFacts, make_runtime, safe_name
from dlperf_tasks.remote.ssh import SSHPool

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """What the live display shows for a running trial."""

    trial: Trial
    nodes: list[str]
    iteration: int = 0
    total: int = 0
    state: str = "starting"


@dataclass
class _NodeRun:
    rank: int
    name: str
    job: jobs.RemoteJob | None = None
    offset: int = 0
    data: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None
    first_error_at: float | None = None
    last_error: str = ""
    unreachable: bool = False
    log_complete: bool = False


def _env_for(suite, trial: Trial) -> dict[str, str]:
    fn = getattr(suite, "env_for", None)
    return dict(fn(trial.cell.topology)) if fn else dict(suite.env or {})


class _Stopped(Exception):
    pass


def run_trial(cluster: Cluster, node_names: list[str], trial: Trial, suite, run_id: str, out_dir: str | os.PathLike,
              *, pool: SSHPool | None = None, runtime: HostRuntime | None = None,
              facts: Mapping[str, NodeFacts] | None = None, attempt: int = 1, poll_s: float = 0.25,
              timeout_s: float | None = None, hang_timeout_s: float | None = None,
              unreachable_grace_s: float = 8.0, kill_grace_s: float = 5.0,
              progress: Callable[[Progress], None] | None = None,
              stop_event: threading.Event | None = None) -> TrialResult:
    """Run ``trial`` on ``node_names`` (node rank order) and return its gated result.

    ``out_dir`` receives the logs. ``pool``/``runtime``/``facts`` come from the sweep's
    preparation; when omitted they are created here (host runtime facts probed).
    ``stop_event`` set from outside (SIGTERM handler) stops the trial like a kill.
    """
    fw = frameworks.get(trial.cell.framework)
    own_pool = pool is None
    pool = pool or SSHPool(cluster)
    runtime = runtime or make_runtime(suite.container, registry=cluster.registry, launcher=suite.launcher,
                                      ssh_port=cluster.mpi_ssh_port)
    topo = trial.cell.topology
    if len(node_names) != topo.nodes:
        raise DlperfError(f"trial {trial.id} needs {topo.nodes} node(s), got {len(node_names)}: {node_names}")
    nodes = [cluster.node(n) for n in node_names]
    for n in nodes:
        if n.gpus < topo.gpus_per_node:
            raise DlperfError(f"trial {trial.id} needs {topo.gpus_per_node} GPUs per node; node {n.name} has {n.gpus}")
    timeout_s = float(timeout_s if timeout_s is not None else suite.timeout_s)
    hang_timeout_s = float(hang_timeout_s if hang_timeout_s is not None else suite.hang_timeout_s)
    out = Path(out_dir)
    specs = [n.node_spec() for n in nodes]
    runs = [_NodeRun(i, n.name) for i, n in enumerate(nodes)]
    prog = Progress(trial, list(node_names), total=trial.cell.window.total)
    tag = safe_name(f"{run_id}_{trial.key}_a{attempt}", 100)
    status: TrialStatus | None = None
    reason = ""
    started = time.time()
    metric_ranks = [r for r in fw.metrics_nodes(trial.cell) if r < len(runs)] or [0]
    notes: list[str] = []

    def report(state: str) -> None:
        prog.state = state
        if progress:
            try:
                progress(prog)
            except Exception:  # noqa: BLE001 - a display must never break a trial
                pass

    # ---- build every node's command first (bad settings = LAUNCH_FAILED, nothing started) ---
    settings = dict(suite.launcher or {})
    env = _env_for(suite, trial)
    if env:
        settings["env"] = {**env, **(settings.get("env") or {})}
    mpi = fw.launch_mode == "mpi"
    if mpi and isinstance(runtime, DockerRuntime):
        settings["ssh_port"] = runtime.ssh_port
    commands: dict[int, str] = {}
    try:
        if facts is None:
            facts = HostRuntime.prepare(runtime, pool, list(node_names))
        launch_ranks = [0] if mpi else list(range(len(nodes)))
        for r in launch_ranks:
            spec = fw.launch(trial, r, specs, settings)
            node = nodes[r]
            log_dir = f"{node.workdir.rstrip('/')}/runs/{safe_name(run_id)}/{tag}"
            kw = {}
            if mpi and isinstance(runtime, DockerRuntime) and len(nodes) > 1:
                kw["mpi_key_dir"] = f"{node.workdir.rstrip('/')}/runs/{safe_name(run_id)}/mpi_ssh"
            commands[r] = runtime.node_command(spec, trial=trial, run_id=run_id, node=node, node_rank=r,
                                               facts=facts[node.name], log_dir=log_dir, attempt=attempt, **kw)
    except RemoteError as exc:
        status, reason = TrialStatus.NODE_UNREACHABLE, str(exc)
    except Exception as exc:  # noqa: BLE001 - a framework's launch() rejecting the settings
        status, reason = TrialStatus.LAUNCH_FAILED, f"building the launch command failed: {type(exc).__name__}: {exc}"
    if status is not None:
        return _finish_without_run(trial, status, reason, node_names, started, pool if own_pool else None)

    def node_error(nr: _NodeRun, exc: Exception, now: float) -> None:
        if nr.first_error_at is None:
            nr.first_error_at = now
        nr.last_error = str(exc)
        if now - nr.first_error_at >= unreachable_grace_s:
            nr.unreachable = True

    poller: ThreadPoolExecutor | None = None
    try:
        report("starting")
        # ---- MPI helpers: sshd containers on every node ------------------------------------
        if mpi and isinstance(runtime, DockerRuntime) and len(nodes) > 1:
            def helper(i: int) -> None:
                node = nodes[i]
                key_dir = f"{node.workdir.rstrip('/')}/runs/{safe_name(run_id)}/mpi_ssh"
                runtime.install_mpi_keys(pool, node.name, key_dir)
                # every node, node 0 included: mpirun may reach its own node through the address list too
                port = runtime.ssh_port
                probe = f"(exec 3<>/dev/tcp/{node.peer_address}/{port}) 2>/dev/null"
                if pool.run(node.name, "bash -c " + _q(probe), timeout=30).rc == 0:
                    raise _LaunchError(f"node {node.name}: port {port} for the MPI containers' sshd is already in "
                                       f"use (the node's own sshd?); set mpi_ssh_port in the inventory or pass "
                                       f"--mpi-ssh-port")
                log_dir = f"{node.workdir.rstrip('/')}/runs/{safe_name(run_id)}/{tag}"
                cmd = runtime.mpi_helper_command(trial=trial, run_id=run_id, node=node, facts=facts[node.name],
                                                 log_dir=log_dir, key_dir=key_dir, attempt=attempt)
                res = pool.run(node.name, cmd, timeout=120)
                if res.rc != 0:
                    raise _LaunchError(f"node {node.name}: starting the MPI sshd container failed: "
                                       f"{res.stderr.strip()[-300:]}")
                wait = (f"for i in $(seq 100); do (exec 3<>/dev/tcp/{node.peer_address}/{port}) 2>/dev/null "
                        f"&& exit 0; sleep 0.1; done; exit 1")
                if pool.run(node.name, "bash -c " + _q(wait), timeout=30).rc != 0:
                    raise _LaunchError(f"node {node.name}: the MPI container's sshd did not open port {port}")

            _parallel([lambda i=i: helper(i) for i in range(len(nodes))])

        # ---- start every node's job at once ------------------------------------------------
        def start(r: int) -> None:
            nr = runs[r]
            wd = nodes[r].workdir.rstrip("/")
            space_paths = [jobs.jobs_base_dir(wd), f"{wd}/runs/{safe_name(run_id)}"]
            try:  # the free-space check rides along in the start's SSH round trip
                nr.job = jobs.start_job(pool, nr.name, commands[r], jobs.generate_job_id(f"{tag}_{nr.name}"),
                                        environment={"DLPERF_TRIAL": trial.key},
                                        precheck=_space_check_script(space_paths))
            except jobs.PrecheckFailed as exc:
                _raise_no_space(nr.name, str(exc))

        _parallel([lambda r=r: start(r) for r in commands])
        poller = ThreadPoolExecutor(max_workers=max(1, len(runs)), thread_name_prefix="dlperf-poll")
        t0 = time.monotonic()
        last_progress = t0
        last_alive_check = t0
        best_iter = 0
        report("running")
        # ---- watch ---------------------------------------------------------------------
        while status is None:
            if stop_event is not None and stop_event.is_set():
                raise _Stopped("stopped by request (SIGTERM/interrupt)")
            now = time.monotonic()
            def poll_one(nr: _NodeRun) -> bool:
                """Exit code first, then the new log bytes (so an exited job's log is read complete)."""
                if nr.job is None or nr.exit_code is not None:
                    return False
                try:
                    code = jobs.exit_code(pool, nr.job)
                    chunk = jobs.read_log(pool, nr.job, nr.offset)
                    nr.data += chunk
                    nr.offset += len(chunk)
                    if code is not None:
                        nr.exit_code, nr.log_complete = code, True
                    nr.first_error_at = None
                    return bool(chunk) and nr.rank in metric_ranks
                except RemoteError as exc:
                    node_error(nr, exc, now)
                    return False

            polled = [nr for nr in runs if nr.job is not None and nr.exit_code is None]
            if len(polled) > 1:
                new_metric_data = any(list(poller.map(poll_one, polled)))
            else:
                new_metric_data = any(poll_one(nr) for nr in polled)
            if new_metric_data:
                it = _max_iteration(fw, [runs[r].data for r in metric_ranks])
                if it > best_iter:
                    best_iter, last_progress = it, now
                    prog.iteration = it
                    report("running")
            if now - last_alive_check > 5.0:  # a job that died without writing its exit code
                last_alive_check = now
                for nr in runs:
                    if nr.job is not None and nr.exit_code is None and not nr.unreachable:
                        try:
                            if not jobs.is_alive(pool, nr.job) and jobs.exit_code(pool, nr.job) is None:
                                nr.exit_code = VANISHED
                        except RemoteError as exc:
                            node_error(nr, exc, now)
            lost = [nr for nr in runs if nr.unreachable]
            failed = [nr for nr in runs if nr.exit_code not in (None, 0)]
            active = [nr for nr in runs if nr.job is not None]
            if lost:
                status = TrialStatus.NODE_UNREACHABLE
                reason = "; ".join(f"node {nr.name} unreachable: {nr.last_error}" for nr in lost)
            elif active and all(nr.exit_code is not None for nr in active):
                break  # finished (exit codes judged by the gate)
            elif failed:
                status = TrialStatus.NONZERO_EXIT
                reason = "; ".join(_exit_text(nr) for nr in failed)
            elif now - t0 > timeout_s:
                status = TrialStatus.TIMEOUT
                reason = f"trial ran longer than {timeout_s:.0f} s (wall clock); killed"
            elif now - last_progress > hang_timeout_s:
                status = TrialStatus.HANG
                where = f"after iteration {best_iter}" if best_iter else "before the first iteration"
                reason = f"no new iteration line for {hang_timeout_s:.0f} s ({where}); killed"
            else:
                time.sleep(poll_s)
    except _LaunchError as exc:
        status, reason = TrialStatus.LAUNCH_FAILED, str(exc)
    except RemoteError as exc:
        status = TrialStatus.NODE_UNREACHABLE
        reason = str(exc) if exc.node else f"SSH failure: {exc}"
        for nr in runs:
            if nr.name == exc.node:
                nr.unreachable = True
    except (_Stopped, KeyboardInterrupt) as exc:
        status, reason = TrialStatus.NOT_RUN, f"interrupted: {exc}" if str(exc) else "interrupted"
        _cleanup(pool, runtime, runs, run_id, trial, kill_grace_s, notes)
        _collect(pool, fw, trial, runs, out, notes)
        raise
    finally:
        if poller is not None:
            poller.shutdown(wait=True)
        if status is not TrialStatus.NOT_RUN:
            report("cleanup")
            _cleanup(pool, runtime, runs, run_id, trial, kill_grace_s, notes)
            _collect(pool, fw, trial, runs, out, notes)
    finished = time.time()
    launch_failed = [nr for nr in runs if nr.exit_code in LAUNCH_EXIT_CODES or nr.exit_code == VANISHED]
    if launch_failed and status in (None, TrialStatus.NONZERO_EXIT) and best_iter_seen(fw, runs, metric_ranks) == 0:
        status = TrialStatus.LAUNCH_FAILED
        reason = "; ".join(_exit_text(nr) for nr in launch_failed)
        tail = bytes(launch_failed[0].data[-400:]).decode(errors="replace").strip()
        if tail:
            reason += f": {tail}"
    exit_codes = {nr.name: (None if nr.exit_code == VANISHED else nr.exit_code)
                  for nr in runs if nr.job is not None or nr.rank in commands}
    from dlperf_tasks.extract import gate_run_logs

    if status == TrialStatus.NONZERO_EXIT and not any(nr.exit_code == VANISHED for nr in runs):
        runtime_status, runtime_reason = None, ""  # the gate names the non-zero exit codes itself
    else:
        runtime_status, runtime_reason = status, reason
    result = gate_run_logs(trial, out, exit_codes=exit_codes, runtime_status=runtime_status,
                           runtime_reason=runtime_reason, nodes=list(node_names), started_at=started,
                           finished_at=finished)
    if status == TrialStatus.NONZERO_EXIT and result.status == TrialStatus.OK:  # pragma: no cover - defensive
        result.status, result.reason = status, reason
    if notes:
        result.reason = "; ".join([result.reason] + notes) if result.reason else "; ".join(notes)
    report(result.status.value)
    if own_pool:
        pool.close()
    return result


class _LaunchError(DlperfError):
    pass


#: exit codes of ``docker run`` / the shell meaning "could not start" (daemon error, not executable, not found)
LAUNCH_EXIT_CODES = (125, 126, 127)
#: marker for a job whose process group vanished without writing an exit code
VANISHED = -999


def _exit_text(nr: "_NodeRun") -> str:
    if nr.exit_code == VANISHED:
        return f"node {nr.name}: the job's processes vanished without an exit code"
    if nr.exit_code in LAUNCH_EXIT_CODES:
        return f"node {nr.name} could not start the trial (exit {nr.exit_code})"
    return f"node {nr.name} exited with code {nr.exit_code}"


#: a node's log/job directories need at least this much free space (KiB) before a trial starts there
MIN_FREE_KIB = 1024


def _space_check_script(paths: list[str]) -> str:
    """Shell: for each path (or its nearest existing parent) print ``path|<df line>`` and exit
    jobs.PRECHECK_RC when a filesystem has less than MIN_FREE_KIB free."""
    walk = "".join(f'p={_q(p)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
                   f'line="$p|$(df -Pk "$p" | tail -1)"; '
                   f'a=$(df -Pk "$p" | tail -1 | awk \'{{print $4}}\'); '
                   f'case "$a" in ""|*[!0-9]*) ;; *) if [ "$a" -lt {MIN_FREE_KIB} ]; then echo "$line"; bad=1; fi;; esac; '
                   for p in paths)
    return f"bad=0; {walk}if [ $bad = 1 ]; then exit {jobs.PRECHECK_RC}; fi; exit 0"


def _raise_no_space(node: str, output: str) -> None:
    for line in output.splitlines():
        path, _, df = line.partition("|")
        cols = df.split()
        if len(cols) >= 4 and cols[3].isdigit():
            raise _LaunchError(f"node {node}: No space left on device for the trial's logs in {path} "
                               f"({cols[3]} KiB free on the filesystem mounted at {cols[5] if len(cols) > 5 else '?'})")
    raise _LaunchError(f"node {node}: the start precheck refused the trial: {output[-300:]}")


def _check_space(pool: SSHPool, node: str, paths: list[str]) -> None:
    """Raise a launch error naming the node and the directory when a log/job directory (or its
    nearest existing parent) has less than MIN_FREE_KIB free: the job could not write its log."""
    walk = "".join(f'p={_q(p)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
                   f'echo "{p}|$(df -Pk "$p" | tail -1)"; ' for p in paths)
    for line in pool.run(node, walk, timeout=30).stdout.splitlines():
        path, _, df = line.partition("|")
        cols = df.split()
        if len(cols) >= 4 and cols[3].isdigit() and int(cols[3]) < MIN_FREE_KIB:
            raise _LaunchError(f"node {node}: No space left on device for the trial's logs in {path} "
                               f"({cols[3]} KiB free on the filesystem mounted at {cols[5] if len(cols) > 5 else '?'})")


def best_iter_seen(fw, runs: list["_NodeRun"], metric_ranks: list[int]) -> int:
    return _max_iteration(fw, [runs[r].data for r in metric_ranks if r < len(runs)])


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _parallel(fns: list[Callable[[], None]]) -> None:
    """Run ``fns`` concurrently; re-raise the first error (a RemoteError keeps its node)."""
    if len(fns) == 1:
        fns[0]()
        return
    with ThreadPoolExecutor(max_workers=len(fns)) as ex:
        futs = [ex.submit(f) for f in fns]
        errors = []
        for f in futs:
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
    if errors:
        raise errors[0]


def _max_iteration(fw, blobs: list[bytearray]) -> int:
    best = 0
    for b in blobs:
        if not b:
            continue
        try:
            parsed = fw.parse(bytes(b).decode(errors="replace").splitlines(keepends=True))
        except Exception:  # noqa: BLE001 - parsers must not raise; a progress check never fails a trial
            continue
        if parsed.facts.iterations_seen:
            best = max(best, max(parsed.facts.iterations_seen))
    return best


def _cleanup(pool: SSHPool, runtime: HostRuntime, runs: list[_NodeRun], run_id: str, trial: Trial,
             grace: float, notes: list[str]) -> None:
    """Kill every job's process group, then remove the trial's containers on every node, then check
    the nodes are idle (each phase in parallel over the nodes). Errors on unreachable nodes are
    noted, never raised."""
    reachable: list[_NodeRun] = []
    for nr in runs:
        if nr.unreachable:
            try:  # one quick try: the node may be back
                pool.run(nr.name, "true", timeout=3, retries=0)
                nr.unreachable = False
            except RemoteError:
                notes.append(f"cleanup skipped on unreachable node {nr.name}")
                continue
        reachable.append(nr)

    def phase(fn: Callable[[_NodeRun], None]) -> None:
        def guarded(nr: _NodeRun) -> None:
            try:
                fn(nr)
            except RemoteError as exc:
                notes.append(f"cleanup on node {nr.name} failed: {exc}")
        with ThreadPoolExecutor(max_workers=max(1, len(reachable))) as ex:
            list(ex.map(guarded, reachable))

    def kill(nr: _NodeRun) -> None:
        if nr.job is not None and nr.exit_code is None:
            jobs.kill_job(pool, nr.job, grace_s=grace)

    def finish(nr: _NodeRun) -> None:
        # logs first (SFTP), then one round trip: containers removed, job dir removed, leftovers listed
        _collect_one(pool, nr, notes)
        extra = ""
        if nr.job is not None and nr.log_complete:
            extra = jobs.build_posix_cleanup_command(nr.job.paths.job_dir, nr.job.paths.base_dir)
        left = runtime.finish(pool, nr.name, run_id, trial.key, extra)
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.3)
            left = runtime.finish(pool, nr.name, run_id, trial.key)
        if left:
            notes.append(f"node {nr.name} not idle after cleanup: {', '.join(left[:5])}")

    phase(kill)
    phase(finish)


def _collect_one(pool: SSHPool, nr: "_NodeRun", notes: list[str]) -> None:
    """Finish reading a node's log over SFTP (what the poll loop has not read yet)."""
    if nr.job is None or nr.unreachable or nr.log_complete:
        return
    try:
        rest = jobs.read_log(pool, nr.job, nr.offset)
        nr.data += rest
        nr.offset += len(rest)
        nr.log_complete = True
    except RemoteError as exc:
        notes.append(f"log of node {nr.name} may be incomplete: {exc}")


def _collect(pool: SSHPool, fw, trial: Trial, runs: list[_NodeRun], out: Path, notes: list[str]) -> None:
    """Write each node's log at the seeds' path (also for failed trials and unreachable nodes:
    whatever was streamed before the node went away)."""
    for nr in runs:
        if nr.job is None:
            continue
        _collect_one(pool, nr, notes)
        dest = out / fw.log_relpath(trial, nr.rank)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(bytes(nr.data))


def _finish_without_run(trial: Trial, status: TrialStatus, reason: str, node_names: list[str], started: float,
                        pool: SSHPool | None) -> TrialResult:
    if pool is not None:
        pool.close()
    return TrialResult(trial=trial, status=status, reason=reason, nodes=list(node_names), started_at=started,
                       finished_at=time.time())
