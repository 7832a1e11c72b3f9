"""Polling a trial's detached remote jobs: the one watchdog of a remote trial, whether the
process that started the jobs waits for them (``dlperf sweep``, a non-deferring task: :func:`wait`)
or a trigger polls them from another process while the task is deferred (no scheduler import
here; the trigger calls :func:`poll_once` in a thread).

:class:`JobsWatch` is plain data (it travels in the trigger's serialized kwargs and back in its
event): the jobs (node + job directory, :mod:`dlperf_tasks.remote.jobs`), the limits, the
progress seen so far and the node leases the trial holds. :func:`poll_once` applies the rules:

- a node whose polls keep failing for ``grace_s`` -> ``unreachable`` (names it);
- every job wrote its exit status -> ``exited`` (with the exit codes);
- one job failed (non-zero status) -> ``exited`` at once (a multi-node job cannot recover
  from a dead rank; whoever finishes the trial stops the others);
- a job neither running nor with an exit status -> ``vanished`` (node rebooted, job killed);
- the trial ran longer than ``timeout_s`` -> ``timeout``;
- no job made progress (a higher iteration number in the log of a job that carries the
  iteration lines, or without a parser new log bytes) for ``hang_s`` -> ``hang``.

Leases: each poll renews the trial's node leases (``leases``: ``{"node", "token", "run_id"}``,
:mod:`dlperf_tasks.remote.allocation`) once ``lease_ttl_s / 4`` has passed since the last
renewal, to ``lease_ttl_s`` from now. The watcher that polls keeps the nodes; when nobody polls
(process gone, trigger lost) the leases expire ``lease_ttl_s`` later. A lease token is an
ownership tag, not a credential (SSH keys never enter the watch).

:func:`stop_jobs` is the cleanup path: TERM then KILL each job's process group and remove its
job directory.

Times are wall-clock epoch seconds (the watch may be polled on another host than the one that
started it).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.jobs import JobPaths, RemoteJob, exit_code, is_alive, kill_job, read_log, remove_job_dir
from dlperf_tasks.frameworks import get
from dlperf_tasks.remote.watch import progress_state
from dlperf_tasks.remote.allocation import renew_all
from dlperf_tasks.remote.trialdocs import Verdict

STARTUP_S = 10.0  # a job younger than this may not have written its pid file yet
READ_MAX = 1 << 20  # log bytes read per job and poll (progress only; the finish copies the full logs)
ALIVE_EVERY_S = 5.0  # how often running jobs are checked for having vanished (one SSH command per job)


@dataclass
class JobsWatch:
    jobs: list[dict[str, Any]]  # {"node", "job_id", "base_dir"[, "progress": False]}
    timeout_s: float
    hang_s: float
    started: float = field(default_factory=time.time)
    framework: str | None = None  # parses iteration numbers when given
    offsets: dict[str, int] = field(default_factory=dict)  # job_id -> bytes of the log seen
    iterations: dict[str, int] = field(default_factory=dict)  # job_id -> highest iteration seen
    last_progress: float = 0.0
    grace_s: float = 8.0  # a node unreachable this long ends the trial
    errors: dict[str, list] = field(default_factory=dict)  # node -> [first failure time, last error]
    alive_checked: float = 0.0
    leases: list[dict[str, str]] = field(default_factory=list)  # {"node", "token", "run_id"}
    lease_ttl_s: float = 120.0
    renewed_at: float = 0.0
    lost_leases: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "JobsWatch":
        return cls(**dict(doc))

    @classmethod
    def of(cls, jobs: list[RemoteJob], timeout_s: float, hang_s: float, framework: str | None = None,
           progress_nodes: list[str] | None = None, **kw) -> "JobsWatch":
        """``progress_nodes``: the nodes whose logs carry the iteration lines (default: all)."""
        return cls(jobs=[{"node": j.node, "job_id": j.paths.job_id, "base_dir": j.paths.base_dir,
                          "progress": progress_nodes is None or j.node in progress_nodes} for j in jobs],
                   timeout_s=timeout_s, hang_s=hang_s, framework=framework, **kw)

    def remote_jobs(self) -> list[RemoteJob]:
        return [RemoteJob(j["node"], JobPaths(j["job_id"], j["base_dir"])) for j in self.jobs]

    @property
    def max_iteration(self) -> int:
        return max(self.iterations.values(), default=0)


def _progress(pool, w: JobsWatch, job: RemoteJob, parse: bool) -> bool:
    """Read the job's new complete lines; True when its iteration (or, without a parser, its log) grew."""
    if w.framework and not parse:
        return False  # a node without the iteration lines: its log is copied by the finish only
    off = w.offsets.get(job.paths.job_id, 0)
    data = read_log(pool, job, off, READ_MAX)
    if not data:
        return False
    cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    if cut == 0 and len(data) < READ_MAX:
        return False  # an unfinished line: read it whole next time
    data = data[:cut] if cut else data
    w.offsets[job.paths.job_id] = off + len(data)
    if not w.framework:
        return True
    state = progress_state(get(w.framework))
    state.feed(data.decode("utf-8", "replace"))
    top = state.max_iteration or 0
    if top > w.iterations.get(job.paths.job_id, 0):
        w.iterations[job.paths.job_id] = top
        return True
    return False


def _poll_jobs(pool, w: JobsWatch, now: float) -> tuple[dict[str, int | None], bool]:
    """Every job's exit status (None: running or unreachable) and whether any made progress;
    SSH failures are kept per node in ``w.errors``."""
    flags = {j["job_id"]: j.get("progress", True) for j in w.jobs}

    def one(job: RemoteJob):
        try:
            code = exit_code(pool, job)
            moved = _progress(pool, w, job, flags[job.paths.job_id])
        except RemoteError as exc:
            first = w.errors.get(job.node, [now, ""])[0]
            w.errors[job.node] = [first, str(exc)]
            return None, False
        w.errors.pop(job.node, None)
        return code, moved

    jobs = w.remote_jobs()
    if len(jobs) > 1:
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="dlperf-poll") as ex:
            got = list(ex.map(one, jobs))
    else:
        got = [one(j) for j in jobs]
    return {j.node: g[0] for j, g in zip(jobs, got)}, any(g[1] for g in got)


def _vanished(pool, w: JobsWatch, codes: dict[str, int | None], now: float) -> list[str]:
    """Jobs whose process group is gone without an exit status (checked every ALIVE_EVERY_S)."""
    if now - w.started <= STARTUP_S or now - w.alive_checked < ALIVE_EVERY_S:
        return []
    w.alive_checked = now
    gone = []
    for job in w.remote_jobs():  # (a just-started job writes its pid file a moment later)
        if codes[job.node] is None and job.node not in w.errors:
            try:
                if not is_alive(pool, job) and exit_code(pool, job) is None:
                    gone.append(job.node)
            except RemoteError:
                pass  # counted by the next poll's error rule
    return gone


def renew_leases(pool, w: JobsWatch, now: float) -> None:
    """Renew the trial's node leases when a quarter of their TTL has passed since the last renewal."""
    if not w.leases or now - w.renewed_at < w.lease_ttl_s / 4:
        return

    w.renewed_at = now
    w.lost_leases += [n for n in renew_all(pool, w.leases, w.lease_ttl_s) if n not in w.lost_leases]


def lost_lease_reason(watch: Mapping[str, Any] | None) -> str | None:
    """Why a trial whose watch found a node's lease taken by someone else (renewal refused:
    it expired and another run holds the node now) cannot be counted, or None."""
    lost = list((watch or {}).get("lost_leases") or [])
    if not lost:
        return None
    return (f"the lease of node(s) {', '.join(lost)} was lost while the trial ran (another run may have "
            "used the node): not counted")


def poll_once(pool, w: JobsWatch, now: float | None = None) -> Verdict | None:
    """One poll of every job; the verdict (``{"status", "exit_codes", "reason"[, "nodes"]}``) or
    None while the trial runs on. ``w`` keeps the progress seen (serialize it again afterwards)."""
    now = time.time() if now is None else now
    if not w.last_progress:
        w.last_progress = w.started
    renew_leases(pool, w, now)
    codes, moved = _poll_jobs(pool, w, now)
    if moved:
        w.last_progress = now
    lost = [n for n, (first, _) in w.errors.items() if now - first >= w.grace_s]
    if lost:
        return {"status": "unreachable", "exit_codes": codes, "nodes": lost,
                "reason": "; ".join(f"node {n} unreachable: {w.errors[n][1]}" for n in lost)}
    if all(c is not None for c in codes.values()):
        return {"status": "exited", "exit_codes": codes, "reason": ""}
    bad = {n: c for n, c in codes.items() if c not in (None, 0)}
    if bad:  # the others may have ended in the same second: read their status once more
        for job in w.remote_jobs():
            if codes[job.node] is None and job.node not in w.errors:
                try:
                    codes[job.node] = exit_code(pool, job)
                except RemoteError:
                    pass  # unreachable now: still running as far as we know; the failed rank decides
        return {"status": "exited", "exit_codes": codes, "reason": f"exit status {bad} on a node"}
    gone = _vanished(pool, w, codes, now)
    if gone:
        return {"status": "vanished", "exit_codes": codes, "nodes": gone,
                "reason": f"job on {', '.join(gone)} is gone without status"}
    if now - w.started > w.timeout_s:
        return {"status": "timeout", "exit_codes": codes,
                "reason": f"trial ran longer than {w.timeout_s:.0f} s (wall clock); killed"}
    if now - w.last_progress > w.hang_s:
        it = w.max_iteration
        where = f"after iteration {it}" if it else "before the first iteration"
        what = "no new iteration line" if w.framework else "no new log output"
        return {"status": "hang", "exit_codes": codes, "reason": f"{what} for {w.hang_s:.0f} s ({where}); killed"}
    return None


def wait(pool, w: JobsWatch, poll_s: float, stop: Callable[[], bool] | None = None,
         tick: Callable[[int], None] | None = None) -> Verdict:
    """Poll until a verdict (the in-process watcher; a trigger runs the same :func:`poll_once`).
    ``stop()`` true -> ``{"status": "stopped"}``; ``tick(iteration)`` on each new iteration."""
    seen = w.max_iteration
    while True:
        if stop is not None and stop():
            return {"status": "stopped", "exit_codes": {}, "reason": "stopped by request (SIGTERM/interrupt)"}
        verdict = poll_once(pool, w)
        if tick is not None and w.max_iteration > seen:
            seen = w.max_iteration
            tick(seen)
        if verdict is not None:
            return verdict
        time.sleep(poll_s)


def kill_jobs(pool, w: JobsWatch, grace_s: float = 5.0) -> list[str]:
    """Kill every job's process group (job directories and logs stay for the finish); the nodes
    where a job would not die or could not be reached."""
    def one(job: RemoteJob) -> str | None:
        try:
            return None if kill_job(pool, job, grace_s=grace_s) else job.node
        except Exception:  # noqa: BLE001 - one unreachable node must not stop the others
            return job.node

    jobs = w.remote_jobs()
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
        return [n for n in ex.map(one, jobs) if n]


def stop_jobs(pool, w: JobsWatch, grace_s: float = 5.0) -> list[str]:
    """Kill every job's process group and remove its job directory; the nodes where a job
    would not die (the caller reports them)."""
    stuck = kill_jobs(pool, w, grace_s)
    for job in w.remote_jobs():
        try:
            remove_job_dir(pool, job)
        except Exception:  # noqa: BLE001 - one unreachable node must not stop the others' cleanup
            if job.node not in stuck:
                stuck.append(job.node)
    return stuck
