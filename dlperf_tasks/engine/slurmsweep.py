"""Engine step 3 on a Slurm cluster (``dlperf sweep --cluster slurm.yaml``): the trials as Slurm jobs.

Before anything is submitted the partition, account, QoS and reservation are checked on the login node
(``remote.slurm_check.validate_before_submit``: one error naming the file and field). Then at most
``slurm.max_in_flight`` jobs are submitted at once; no dlperf lease is taken (Slurm places the jobs,
``--exclusive``); quarantined nodes join ``--exclude``. One SSH command per poll asks ``squeue`` and
``sacct`` for every job of the run. An ended job's per-rank logs are copied into the run dir where the
Docker runtime puts them and gated the same way (``measure.extract.gate_run_logs``); Slurm's end state
becomes the runtime status with its reason (``remote.slurm_jobs.end_status``), retriable ones are
retried under the sweep's retry count. Each attempt's job (id, node list: the allocation squeue showed
while it ran, else sacct's; sacct state, exit code, queue and run time) is kept in ``slurm_jobs.json`` in the run dir. A stop, an error or Ctrl-C ``scancel``s
every job still queued or running.
"""

from __future__ import annotations

import time
from typing import Any

from dlperf_tasks.core.model import Trial, TrialResult
from dlperf_tasks.engine.rundir import write_json
from dlperf_tasks.engine.schedule import Batch
from dlperf_tasks.remote import slurm_jobs, slurm_trial
from dlperf_tasks.remote.slurm_check import validate_before_submit
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.remote.slurm_script import SlurmJob, options_of
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.telemetry.commands import gpu_loop_command


class _Run:
    def __init__(self, cluster: SlurmCluster, todo: list[Trial], b: Batch, image: str | None, pool, login: str,
                 outside: list[str] | None = None):
        self.b, self.pool, self.login, self.image = b, pool, login, image
        quarantined = b.decisions.excluded() if b.decisions is not None else {}
        self.opts = options_of(cluster.slurm, [*quarantined, *(outside or [])])
        self.pinned = slurm_trial.pinned_digest(b.suite, self.opts, image if b.suite.container else None)
        self.queue = slurm_trial.SubmitQueue(cluster.slurm.max_in_flight, waiting=[t.id for t in todo])
        self.trials = {t.id: t for t in todo}
        self.attempt = {t.id: 1 for t in todo}
        self.jobs: dict[str, SlurmJob] = {}
        self.started: dict[str, float] = {}
        self.records: dict[str, list[dict[str, Any]]] = {}
        self.notes: dict[str, str] = {}
        self.allocated: dict[str, str] = {}  # trial id -> the node list squeue showed while its job ran

    def submit_more(self) -> None:
        for tid in self.queue.to_submit():
            trial = self.trials[tid]
            job = slurm_trial.build_job(trial, self.b.suite, self.b.rd.run_id, self.opts,
                                        image=self.image if self.b.suite.container else None,
                                        gpus_per_node=trial.cell.topology.gpus_per_node, attempt=self.attempt[tid],
                                        telemetry=[gpu_loop_command()])
            job_id = slurm_trial.submit(self.pool, self.login, job)
            self.queue.submitted(tid, job_id)
            self.jobs[tid], self.started[tid] = job, time.time()
            self.b.display.emit(f"  submit {tid} as Slurm job {job_id} (attempt {self.attempt[tid]})")

    def show(self, states: dict[str, slurm_jobs.JobState]) -> None:
        for tid in self.queue.in_flight():
            st = states.get(self.queue.jobs[tid])
            if st is None:
                continue
            if st.state == "RUNNING" and st.nodes:
                self.allocated[tid] = st.nodes
            note = slurm_jobs.pending_note(st) + (f" on {st.nodes}" if st.state == "RUNNING" and st.nodes else "")
            if self.notes.get(tid) != note:
                self.notes[tid] = note
                self.b.display.emit(f"         {tid} job {st.job_id}: {note}")

    def finish(self, tid: str) -> TrialResult:
        trial, job = self.trials[tid], self.jobs[tid]
        st = slurm_jobs.with_allocation(self.queue.ended[tid], self.allocated.pop(tid, ""))
        self.records.setdefault(tid, []).append({**slurm_jobs.trial_record(st), "attempt": self.attempt[tid]})
        write_json(self.b.rd.path / "slurm_jobs.json", self.records)
        return slurm_trial.gate_job(self.pool, self.login, job.log_dir, trial, st, self.b.rd.path, self.started[tid],
                                    pinned=self.pinned)

    def step(self, ran: list[TrialResult]) -> None:
        states = slurm_trial.poll(self.pool, self.login, self.queue.active_job_ids())
        self.show(states)
        for tid in self.queue.update(states):
            r = self.finish(tid)
            self.b.display.finished(r, self.attempt[tid])
            if r.status.retriable and self.attempt[tid] <= self.b.retries:
                self.attempt[tid] += 1
                self.queue.retry(tid)
                continue
            self.b.rd.save_trial(r)
            ran.append(r)


def run_on_slurm(todo: list[Trial], b: Batch, cluster: SlurmCluster, image: str | None,
                 nodes: list[str] | None = None) -> list[TrialResult]:
    """Every trial of ``todo`` as Slurm jobs through the cluster's login node; their results. ``nodes``
    (names or Slurm node lists, e.g. an A/B confirmation's first round's): every job runs on them only
    (the partition's other nodes are excluded; Slurm picks as many of them as a job needs)."""
    ran: list[TrialResult] = []
    with SSHPool(cluster.login_cluster()) as pool:
        login = cluster.login_names[0]
        validate_before_submit(cluster, pool, login)
        outside = None
        if nodes:
            outside = slurm_trial.outside_pinned(pool, login, cluster.slurm.partition, nodes)
            b.display.emit(f"Slurm jobs pinned to {', '.join(nodes)} (--exclude of the partition's other nodes)")
        run = _Run(cluster, todo, b, image, pool, login, outside)
        slurm_trial.prepare(pool, login, run.opts, b.suite)
        b.display.emit(f"Slurm partition {cluster.slurm.partition}: {len(todo)} trial(s), "
                       f"at most {cluster.slurm.max_in_flight} job(s) in flight")
        try:
            while run.queue.waiting or run.queue.in_flight():
                if b.stop.is_set():
                    raise KeyboardInterrupt("stop requested")
                run.submit_more()
                run.step(ran)
                if run.queue.in_flight():
                    b.stop.wait(max(0.5, b.poll_s))
        finally:
            left = run.queue.active_job_ids()
            if left:
                slurm_trial.cancel(pool, login, left)
                b.display.emit(f"cancelled Slurm job(s) {', '.join(left)}")
    return ran
