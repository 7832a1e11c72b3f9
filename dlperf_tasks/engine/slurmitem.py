"""One trial of a DAG run on a Slurm cluster file (``scheduler: slurm`` as the configured cluster): the
trial is a Slurm job. The builders, submission, poll, cancel and gate are ``remote.slurm_trial``'s, the
same ``dlperf sweep --cluster slurm.yaml`` uses (engine/slurmsweep.py); no dlperf lease is taken and the
service's quarantined nodes join ``--exclude``.

* :func:`start` checks the partition/account/QoS/reservation on the login node (one error naming the
  file and field, nothing submitted), names the nodes Slurm reports drained or down, puts the suite's
  catalog files on the shared work dir and submits; it returns the started state (plain data).
* :func:`pin_nodes` picks the nodes an A/B confirmation run pins (its plan step, from ``sinfo`` of the
  partition); :func:`start` confines a pinned run's job to them (``--exclude`` of the partition's others).
* :class:`JobProgress` turns the polled states of a job into progress lines (the pending reason while
  it waits, the nodes once it runs) and, at its end, the event both a deferred trigger and
  :func:`wait` hand to :func:`finish`: the job's sacct state, the queue time apart from the run time.
* :func:`finish` copies the rank logs and gates them (``slurm_trial.gate_job``).
* :func:`cancel_run_jobs` ``scancel``s every job a run started (found by the job-name prefix), the DAG's
  cleanup and a re-run's prepare call it: nothing of a failed or cancelled run is left queued or running.
"""

from __future__ import annotations

import dataclasses
import shlex
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks.core.errors import RemoteError, StoreError
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.engine.clusterconf import load_cluster
from dlperf_tasks.engine.errors import NonRetriable, Retriable
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.remote import slurm_jobs, slurm_trial
from dlperf_tasks.remote.slurm_check import partition_findings, validate_before_submit
from dlperf_tasks.remote.slurm_inventory import SlurmCluster, scheduler_of
from dlperf_tasks.remote.slurm_jobs import JobState
from dlperf_tasks.remote.slurm_script import options_of, run_prefix, trial_prefix
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.telemetry.commands import gpu_loop_command

#: consecutive failed polls (login node unreachable) after which a watch gives up on its job
MAX_POLL_FAILURES = 20


def is_slurm(settings) -> bool:
    """Whether the configured cluster file says ``scheduler: slurm``."""
    if settings.is_local:
        return False
    try:
        return scheduler_of(settings.cluster) == "slurm"
    except RemoteError as exc:
        raise NonRetriable(f"cluster {settings.cluster}: {exc}") from None


def slurm_cluster(settings) -> SlurmCluster:
    """The configured Slurm cluster file, its login hosts with the entry point's credentials."""
    cluster = load_cluster(settings)
    if not isinstance(cluster, SlurmCluster):
        raise NonRetriable(f"cluster {settings.cluster}: not a Slurm cluster file (scheduler: slurm)")
    return cluster


def _quarantined(settings, trial: Trial) -> dict[str, Any]:
    try:
        return Quarantine.for_settings(settings).nodes()
    except (ValueError, StoreError) as exc:
        raise Retriable(f"trial {trial.id}: quarantine state: {exc}") from None


def unavailable_notes(cluster: SlurmCluster, pool, login: str) -> list[str]:
    """The partition's nodes Slurm reports drained, down or not responding, each named with its reason."""
    return [f.text for f in partition_findings(cluster, pool, login) if f.field == "nodes" and f.ok]


def pin_nodes(settings, cells, given: list[str] | None = None) -> list[str]:
    """The nodes an A/B confirmation run pins on the configured Slurm cluster (its plan step), from
    ``sinfo`` of the partition now (:func:`choose_pinned`); the partition, account, QoS and reservation
    are checked first (one line naming the field). The login node not answering is Retriable."""
    cluster = slurm_cluster(settings)
    try:
        quarantined = Quarantine.for_settings(settings).nodes()
    except (ValueError, StoreError) as exc:
        raise Retriable(f"A/B confirmation: quarantine state: {exc}") from None
    avoid = {n: "is excluded by the cluster file (slurm.exclude)" for n in cluster.slurm.exclude}
    avoid.update({n: "is quarantined (dlperf cluster clear NODE)" for n in quarantined})
    login = cluster.login_names[0]
    with SSHPool(cluster.login_cluster()) as pool:
        try:
            rows = slurm_trial.partition_nodes(pool, login, cluster.slurm.partition)
        except RemoteError as exc:  # the login node did not answer
            raise Retriable(f"A/B confirmation: {exc}") from None
        try:
            validate_before_submit(cluster, pool, login)
        except RemoteError as exc:
            raise NonRetriable(f"A/B confirmation: {exc}") from None
    return choose_pinned(rows, cells, avoid, cluster.slurm.partition, given)


def choose_pinned(rows: list[slurm_jobs.PartitionNode], cells, avoid: Mapping[str, str], partition: str,
                  given: list[str] | None = None) -> list[str]:
    """As many nodes as the largest of ``cells`` needs (``slurm_jobs.choose_nodes``: idle ones first; none
    that Slurm reports down, drained, failing or not responding, none with fewer GPUs than the cells ask
    for, none in ``avoid``); ``given``: only those (the conf's ``nodes``). Too few is ONE line naming
    each node left out and why (NonRetriable)."""
    need = max(c.topology.nodes for c in cells)
    gpus = max(c.topology.gpus_per_node for c in cells)
    ok, left_out = slurm_jobs.choose_nodes(rows, gpus, avoid, only=given)
    if len(ok) < need:
        among = f" among {', '.join(given)}" if given else ""
        usable = f" ({', '.join(ok)})" if ok else ""
        raise NonRetriable(f"A/B confirmation needs {need} node(s) with {gpus} GPU(s) in Slurm partition {partition}"
                           f"{among}; {len(ok)} usable{usable}; not usable: {'; '.join(left_out) or 'none'}")
    return ok[:need]


def pinned_of(rd: RunDir) -> list[str]:
    """The nodes the run is pinned to (plan.json ``nodes``: an A/B confirmation run's), else []."""
    return list((rd.read("plan.json") or {}).get("nodes") or [])


def _job(trial: Trial, suite, run_id: str, settings, *, image: str | None, attempt: int,
         outside: list[str] | None = None):
    """The trial attempt's Slurm job (the one builder: ``slurm_trial.build_job``) and its options.
    ``outside``: a pinned run's other nodes of the partition, its whole ``--exclude`` (the pinned nodes
    stay the run's even if quarantined since, as a pinned run's leases do on the Docker runtime)."""
    cluster = slurm_cluster(settings)
    opts = options_of(cluster.slurm, outside if outside is not None else _quarantined(settings, trial))
    image = cluster.resolve_image(image or (suite.container.image if suite.container else None))
    job = slurm_trial.build_job(trial, suite, run_id, opts, image=image if suite.container else None,
                                gpus_per_node=trial.cell.topology.gpus_per_node, attempt=attempt,
                                telemetry=[gpu_loop_command()])
    return cluster, opts, image, job


def dry_run_lines(trial: Trial, suite, run_id: str, settings, *, image: str | None) -> list[str]:
    """A DAG dry run's lines for one trial: its ``sbatch`` line and every ``srun`` line; nothing submitted."""
    _, _, _, job = _job(trial, suite, run_id, settings, image=image, attempt=1)
    return [f"sbatch: {shlex.join(job.sbatch_argv)}", *(f"srun: {line}" for line in job.srun_lines)]


def start(trial: Trial, suite, rd: RunDir, settings, *, image: str | None, attempt: int,
          emit: Callable[[str], None]) -> dict[str, Any]:
    """Submit one trial attempt as a Slurm job; the started state (``slurm``: job id, log dir, login).
    A pinned run's job (:func:`pinned_of`) runs on the pinned nodes only."""
    cluster = slurm_cluster(settings)
    login, pinned = cluster.login_names[0], pinned_of(rd)
    with SSHPool(cluster.login_cluster()) as pool:
        try:
            validate_before_submit(cluster, pool, login)
        except RemoteError as exc:
            raise NonRetriable(f"trial {trial.id}: {exc}") from None
        try:
            outside = slurm_trial.outside_pinned(pool, login, cluster.slurm.partition, pinned) if pinned else None
            if pinned:
                emit(f"  Slurm job pinned to {', '.join(pinned)} (--exclude of the partition's other nodes)")
            cluster, opts, image, job = _job(trial, suite, rd.run_id, settings, image=image, attempt=attempt,
                                             outside=outside)
            for note in unavailable_notes(cluster, pool, login):
                emit(f"  Slurm: {note}")
            slurm_trial.prepare(pool, login, opts, suite)
            job_id = slurm_trial.submit(pool, login, job)
        except RemoteError as exc:
            raise Retriable(f"trial {trial.id}: {exc}") from None
    excluded = f", --exclude={','.join(opts.exclude)}" if opts.exclude else ""
    emit(f"  submit {trial.id} as Slurm job {job_id} ({job.name}, partition {opts.partition}{excluded})")
    return {"trial": trial.to_dict(), "run_id": rd.run_id, "image": image,
            "slurm": {"job_id": job_id, "name": job.name, "log_dir": job.log_dir, "login": login,
                      "submitted_at": time.time(), "attempt": attempt,
                      "pinned": slurm_trial.pinned_digest(suite, opts, image)}}


class JobProgress:
    """What the watch of one job reports: a line when its pending reason or state changes, and the
    event of its end (sacct's row, the pending reasons seen, queue time and run time apart)."""

    def __init__(self, job_id: str, submitted_at: float | None = None):
        self.job_id = job_id
        self.submitted_at = submitted_at or time.time()
        self.notes: list[str] = []
        self.last = ""
        self.failures = 0
        self.allocated = ""  # the node list squeue showed while the job ran (its whole allocation)

    def update(self, st: JobState | None) -> str | None:
        """The progress line for this poll's state, when it changed (None otherwise)."""
        if st is None:
            return None
        if st.state == "RUNNING" and st.nodes:
            self.allocated = st.nodes
        if st.state == "PENDING" and not st.reason:  # just submitted: the scheduler has not looked yet
            note = "pending"
        else:
            note = slurm_jobs.pending_note(st) + (f" on {st.nodes}" if st.state == "RUNNING" and st.nodes else "")
        if note == self.last:
            return None
        self.last = note
        if st.state == "PENDING" and st.reason and note not in self.notes:
            self.notes.append(note)
        waited = time.time() - self.submitted_at
        return f"Slurm job {self.job_id}: {note} ({waited:.0f} s since submission)"

    def ended(self, st: JobState) -> bool:
        """An ended job whose accounting is in (sacct's row); a job squeue no longer shows but sacct has
        not recorded yet is polled again."""
        return not st.active and st.source == "sacct"

    def event(self, st: JobState) -> dict[str, Any]:
        """The end event; the node list is the allocation seen running (sacct's row right at the end may
        name only the nodes still completing), else sacct's."""
        st = slurm_jobs.with_allocation(st, self.allocated)
        return {"status": "ended", "job": st.to_dict(), "pending": list(self.notes), "summary": summary(st, self.notes)}


def summary(st: JobState, notes: list[str]) -> str:
    """``queued 12 s (pending (Resources)), ran 30 s on node[1-2]: COMPLETED exit code 0``."""
    queued = f"queued {st.queue_s:.0f} s" if st.queue_s is not None else "queue time unknown"
    if notes:
        queued += f" ({'; '.join(notes)})"
    ran = f"ran {st.elapsed_s:.0f} s" if st.elapsed_s is not None else "run time unknown"
    where = f" on {st.nodes}" if st.nodes else ""
    code = f" exit code {st.exit_code}" if st.exit_code is not None else ""
    return f"Slurm job {st.job_id}: {queued}, {ran}{where}: {st.state}{code}"


def lost_event(job_id: str, why: str) -> dict[str, Any]:
    return {"status": "lost", "job": None, "pending": [], "summary": f"Slurm job {job_id}: {why}"}


def wait(state: dict[str, Any], settings, *, poll_s: float, stop: threading.Event,
         emit: Callable[[str], None]) -> dict[str, Any]:
    """Watch a started job in this process (a trial not deferred) until it ends; a stop cancels it.
    The same event a deferred trigger fires."""
    job = state["slurm"]
    cluster = slurm_cluster(settings)
    prog = JobProgress(job["job_id"], job.get("submitted_at"))
    with SSHPool(cluster.login_cluster()) as pool:
        try:
            while True:
                if stop.is_set():
                    slurm_trial.cancel(pool, job["login"], [job["job_id"]])
                    emit(f"Slurm job {job['job_id']} cancelled (stop requested)")
                    raise NonRetriable(f"Slurm job {job['job_id']} cancelled: stop requested")
                try:
                    st = slurm_trial.poll(pool, job["login"], [job["job_id"]]).get(job["job_id"])
                    prog.failures = 0
                except RemoteError as exc:
                    prog.failures += 1
                    if prog.failures >= MAX_POLL_FAILURES:
                        return lost_event(job["job_id"], f"not polled: {exc}")
                    st = None
                line = prog.update(st)
                if line:
                    emit(line)
                if st is not None and prog.ended(st):
                    return prog.event(st)
                stop.wait(poll_s)
        except BaseException:
            if not stop.is_set():
                slurm_trial.cancel(pool, job["login"], [job["job_id"]])
            raise


def finish(state: Mapping[str, Any], event: Mapping[str, Any], rd: RunDir, settings,
           emit: Callable[[str], None]) -> TrialResult:
    """The ended job's trial: its rank logs copied into the run dir and gated, Slurm's state kept."""
    job = state["slurm"]
    trial = Trial.from_dict(state["trial"])
    emit(str(event.get("summary") or ""))
    if event.get("status") == "stopped":
        raise NonRetriable(f"trial {trial.id}: {event.get('summary')}")
    if not event.get("job"):
        return TrialResult(trial=trial, status=TrialStatus.LAUNCH_FAILED, reason=str(event.get("summary")))
    st = JobState(**event["job"])
    cluster = slurm_cluster(settings)
    with SSHPool(cluster.login_cluster()) as pool:
        try:
            res = slurm_trial.gate_job(pool, job["login"], job["log_dir"], trial, st, Path(rd.path),
                                       float(job.get("submitted_at") or time.time()), pinned=job.get("pinned"))
            if st.state == "NODE_FAIL" and st.nodes:  # which of the job's nodes Slurm reports down
                bad = slurm_jobs.unavailable_nodes(pool.run(job["login"], slurm_jobs.node_states_command(st.nodes),
                                                            timeout=60).stdout)
                if bad:
                    res = dataclasses.replace(res, reason=f"{res.reason}; Slurm reports {'; '.join(bad)}")
            return res
        except RemoteError as exc:
            raise Retriable(f"trial {trial.id}: collecting the logs of Slurm job {st.job_id}: {exc}") from None


def cancel_started(state: dict[str, Any], settings) -> None:
    """``scancel`` the job of a started trial (its task was killed while deferred)."""
    job = state["slurm"]
    cluster = slurm_cluster(settings)
    with SSHPool(cluster.login_cluster()) as pool:
        slurm_trial.cancel(pool, job["login"], [job["job_id"]])


def cancel_trial_jobs(settings, run_id: str, trial_key: str) -> list[str]:
    """``scancel`` every job of one trial still queued or running (any attempt: its job name starts with
    ``dlperf.<run id>.<trial key>.a``): what a killed trial task does, whether it was killed before its
    job was handed to the trigger or while deferred. The ids cancelled."""
    cluster = slurm_cluster(settings)
    login = cluster.login_names[0]
    with SSHPool(cluster.login_cluster()) as pool:
        ids = _run_jobs(pool, login, (trial_prefix(run_id, trial_key),))
        if ids:
            slurm_trial.cancel(pool, login, ids)
    return ids


def cancel_run_jobs(settings, run_ids, timeout_s: float = 60.0) -> tuple[list[str], list[str]]:
    """``scancel`` every job of ``run_ids`` still queued or running (their job names start with
    ``dlperf.<run id>.``) and wait until squeue no longer lists them: (cancelled job ids, problems)."""
    cluster = slurm_cluster(settings)
    prefixes = tuple(run_prefix(r) for r in run_ids)
    login = cluster.login_names[0]
    with SSHPool(cluster.login_cluster()) as pool:
        ids = _run_jobs(pool, login, prefixes)
        if ids:
            slurm_trial.cancel(pool, login, ids)
        deadline = time.monotonic() + timeout_s
        left = ids
        while left and time.monotonic() < deadline:
            time.sleep(1.0)
            left = _run_jobs(pool, login, prefixes)
    problems = [f"Slurm job(s) {', '.join(left)} still queued or running after scancel"] if left else []
    return ids, problems


def _run_jobs(pool, login: str, prefixes: tuple[str, ...]) -> list[str]:
    res = pool.run(login, slurm_jobs.own_jobs_command(), timeout=60)
    if res.rc != 0:
        raise Retriable(f"squeue on the login node failed: {res.stderr.strip()[-300:]}")
    return [job_id for job_id, name in slurm_jobs.parse_own_jobs(res.stdout) if name.startswith(prefixes)]
