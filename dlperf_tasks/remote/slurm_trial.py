"""Trials on a Slurm cluster, reached over SSH on a login node: build the job of a trial attempt from the
suite (the same frameworks' ``checked_launch`` and source patches as the Docker runtime), submit it, poll
every job of a run over one connection, cancel, and copy the per-rank logs into the run dir where the
Docker runtime puts them (``Framework.log_relpath``), so parsers, validity and reports are unchanged.

No dlperf node lease is taken: Slurm places the job (``--exclusive``). :class:`SubmitQueue` keeps at most
``max_in_flight`` jobs of a run submitted and not ended. Registry credentials are the site's (enroot's
credentials file, Apptainer's): nothing here writes one on the cluster.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlperf_tasks import frameworks
from dlperf_tasks.catalog import patches
from dlperf_tasks.catalog.nodefiles import node_files_dir
from dlperf_tasks.catalog.shipping import put_node_files
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.frameworks._nccl_probe import probe_launcher
from dlperf_tasks.frameworks.launchspec import LaunchSpec
from dlperf_tasks.measure.extract import gate_run_logs
from dlperf_tasks.measure.interconnect import failed_probe, probe_record, probe_settings
from dlperf_tasks.remote import slurm_image, slurm_jobs
from dlperf_tasks.remote.dockercmd import TRIAL_ENV, expand
from dlperf_tasks.remote.slurm_jobs import JobState
from dlperf_tasks.remote.slurm_script import ProbeStep, SlurmJob, SlurmOptions, placeholder_nodes, render_job
from dlperf_tasks.remote.ssh import SSHPool


def build_job(trial: Trial, suite, run_id: str, opts: SlurmOptions, *, image: str | None, gpus_per_node: int,
              attempt: int = 1, interface: str | None = None, telemetry: list[str] | None = None) -> SlurmJob:
    """The Slurm job of one trial attempt: the one builder of a real submission and of the dry run.
    Raises ``LaunchGuardError`` (a ValueError) where the Docker runtime would refuse the launch too."""
    fw = frameworks.get(trial.cell.framework)
    topo = trial.cell.topology
    specs = placeholder_nodes(topo.nodes, gpus_per_node, interface)
    settings = dict(suite.launcher or {})
    env_fn = getattr(suite, "env_for", None)
    env = dict(env_fn(topo)) if env_fn else dict(suite.env or {})
    if env:
        settings["env"] = {**env, **(settings.get("env") or {})}
    if opts.container == "none" and not settings.get("node_files_dir"):
        settings["node_files_dir"] = node_files_dir(opts.shared_dir)
    if opts.container != "none" and getattr(suite, "container", None) is not None:
        opts = dataclasses.replace(opts, mounts=(*suite_mounts(suite, opts), *opts.mounts))
        image = suite.container.pinned_ref(image) if image else image  # by the catalog's digest, as on Docker
    launches = []
    for r in ([0] if fw.launch_mode == "mpi" else range(topo.nodes)):
        spec = fw.checked_launch(trial, r, specs, settings)
        launches.append(LaunchSpec(argv=patches.wrap(suite, spec.argv, spec.workdir, settings), env=spec.env,
                                   workdir=spec.workdir))
    return render_job(opts, run_id=run_id, trial_key=trial.key, attempt=attempt, launch_mode=fw.launch_mode,
                      specs=launches, nodes=topo.nodes, gpus_per_node=gpus_per_node, image=image,
                      env={TRIAL_ENV: trial.key}, telemetry=telemetry,
                      mpirun=str(settings.get("mpirun") or "mpirun"),
                      probe=probe_step(trial, suite, opts, specs, env))


def probe_step(trial: Trial, suite, opts: SlurmOptions, specs, env: dict) -> ProbeStep | None:
    """The interconnect probe of a multi-node trial (None: one node, or the suite declares none / the
    cluster file switched it off). Refused settings give a step that only records why."""
    if trial.cell.topology.nodes < 2:
        return None
    try:
        cfg = probe_settings((getattr(suite, "extra", None) or {}).get("interconnect_probe"), opts.interconnect_probe,
                             where=f"interconnect_probe (suite {suite.id}, Slurm cluster file)")
        if cfg is None:
            return None
        launch = probe_launcher(suite.launcher, cfg)
        if env:
            launch["env"] = {**env, **(launch.get("env") or {})}
        spec = frameworks.get("nccl_probe").checked_launch(trial, 0, specs, launch)
    except ValueError as exc:
        return ProbeStep(None, failed_probe([], str(exc)))
    verdict = {k: cfg[k] for k in ("expected_busbw_gbs", "min_fraction", "slow_scaling_below")}
    return ProbeStep(spec, verdict, int(cfg["timeout_s"]))


def collect_probe(pool: SSHPool, login: str, log_dir: str, trial: Trial, out_dir: Path, nodes: list[str]) -> dict | None:
    """The probe's record of a job (None when its job had no probe step): ``probe.json`` and ``probe.log``
    copied to ``out_dir/probes/<job>.{json,log}``, the log judged (``measure/interconnect.probe_record``)."""
    base = Path(out_dir) / "probes" / Path(log_dir).name
    base.parent.mkdir(parents=True, exist_ok=True)
    if not pool.get(login, f"{log_dir}/probe.json", str(base) + ".json"):
        return None
    try:
        cfg = json.loads(Path(str(base) + ".json").read_text())
    except ValueError as exc:
        return failed_probe(nodes, f"probe.json does not parse: {exc}")
    if not isinstance(cfg, dict):
        return failed_probe(nodes, "probe.json is not a mapping")
    if cfg.get("error"):
        return {**cfg, "nodes": nodes}
    if not pool.get(login, f"{log_dir}/probe.log", str(base) + ".log"):
        return failed_probe(nodes, "no probe.log: the probe step did not run", cfg)
    text = Path(str(base) + ".log").read_text(errors="replace")
    return probe_record(text, trial.cell.topology.world_size, cfg, nodes,
                        log=str(Path("probes") / (Path(log_dir).name + ".log")))


def pinned_digest(suite, opts: SlurmOptions, image: str | None) -> str | None:
    """The digest pyxis must report importing on every node (the catalog's pin of ``image``, the rule the
    Docker runtime follows); None when nothing pins it or the container mode is not pyxis (apptainer pulls
    the digest reference itself and prints no import line to check)."""
    container = getattr(suite, "container", None)
    if opts.container != "pyxis" or not image or container is None:
        return None
    return container.pinned_for(image)


def suite_mounts(suite, opts: SlurmOptions) -> list[str]:
    """The suite's container mounts on the cluster: ``${workdir}`` is the shared work directory (where
    :func:`prepare` puts the catalog files), ``${data_dir}`` its ``data`` directory."""
    values = {"workdir": opts.shared_dir.rstrip("/"), "data_dir": f"{opts.shared_dir.rstrip('/')}/data"}
    return [expand(m, values, f"suite {suite.id}: container mount") for m in suite.container.mounts]


def prepare(pool: SSHPool, login: str, opts: SlurmOptions, suite) -> list[str]:
    """Put the suite's catalog files and patches under the shared work directory (every node sees it)."""
    return put_node_files(pool, login, opts.shared_dir, suite)


def submit(pool: SSHPool, login: str, job: SlurmJob) -> str:
    """Create the job's log directory, then ``sbatch --parsable`` with the script on stdin; the job id."""
    import shlex
    res = pool.run(login, f"mkdir -p {shlex.quote(job.log_dir)} && {shlex.join(job.sbatch_argv)}",
                   timeout=120, stdin=job.script)
    if res.rc != 0:
        raise RemoteError(f"slurm: sbatch of {job.name} refused: {res.stderr.strip()[-400:]}", node=login)
    return slurm_jobs.parse_submit(res.stdout)


def poll(pool: SSHPool, login: str, job_ids) -> dict[str, JobState]:
    """Every job's state, one SSH command for all of them."""
    ids = list(job_ids)
    if not ids:
        return {}
    res = pool.run(login, slurm_jobs.poll_command(ids), timeout=60)
    if res.rc != 0 and "@@sacct" not in res.stdout:
        raise RemoteError(f"slurm: squeue/sacct failed: {res.stderr.strip()[-300:]}", node=login)
    return slurm_jobs.parse_poll(res.stdout)


def partition_nodes(pool: SSHPool, login: str, partition: str) -> list[slurm_jobs.PartitionNode]:
    """The partition's nodes as sinfo shows them now: state, GPUs (gres), the reason Slurm keeps."""
    res = pool.run(login, slurm_jobs.partition_nodes_command(partition), timeout=60)
    if res.rc != 0:
        raise RemoteError(f"slurm: sinfo -p {partition} failed: {res.stderr.strip()[-300:]}", node=login)
    return slurm_jobs.parse_partition_nodes(res.stdout)


def outside_pinned(pool: SSHPool, login: str, partition: str, nodes) -> list[str]:
    """The partition's nodes other than ``nodes`` (names or Slurm node lists such as ``node[3-4]``): what
    ``--exclude`` gets so that every job runs on the pinned nodes only, as many of them as it asks for
    (``--nodelist`` would not do: a job gets all the listed nodes, and others when they are too few; sbatch(1))."""
    res = pool.run(login, slurm_jobs.pinned_nodes_command(partition, nodes), timeout=60)
    return slurm_jobs.outside_pinned(res.stdout, partition)


def cancel(pool: SSHPool, login: str, job_ids) -> None:
    ids = list(job_ids)
    if ids:
        pool.run(login, slurm_jobs.cancel_command(ids), timeout=60)


def collect_logs(pool: SSHPool, login: str, log_dir: str, trial: Trial, out_dir: Path) -> list[str]:
    """Copy each node's output (``<log_dir>/rank-node<k>.log``) to ``out_dir / log_relpath(trial, k)``;
    the names of logs that were missing."""
    missing = []
    for k, dest in _rank_logs(trial, out_dir):
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not pool.get(login, f"{log_dir}/rank-node{k}.log", str(dest)):
            missing.append(f"rank-node{k}.log")
    return missing


def _rank_logs(trial: Trial, out_dir: Path) -> list[tuple[int, Path]]:
    fw = frameworks.get(trial.cell.framework)
    ranks = [0] if fw.launch_mode == "mpi" else range(trial.cell.topology.nodes)
    return [(k, Path(out_dir) / fw.log_relpath(trial, k)) for k in ranks]


def batch_hosts(pool: SSHPool, login: str, log_dir: str, job_id: str) -> list[str]:
    """The job's node names as its batch script resolved them (its ``dlperf-nodes:`` line), in rank order."""
    batch_out = pool.read(login, f"{log_dir}/slurm-{job_id}.out", max_bytes=65536) or b""
    return slurm_image.batch_hosts(batch_out.decode(errors="replace"))


def image_env(trial: Trial, hosts: list[str], out_dir: Path) -> dict[str, dict[str, str | None]]:
    """Each node's ``node_env`` (the digest pyxis imported there), from the copied rank logs; nodes are
    named as Slurm named them (``hosts``, the batch script's node list), else ``node<k>``."""
    return slurm_image.node_images((hosts[k] if k < len(hosts) else f"node{k}", slurm_image.read_head(dest))
                                   for k, dest in _rank_logs(trial, out_dir) if dest.is_file())


def gate_job(pool: SSHPool, login: str, log_dir: str, trial: Trial, st: JobState, out_dir: Path,
             submitted_at: float, pinned: str | None = None) -> TrialResult:
    """An ended job's trial result: its rank logs copied into ``out_dir`` and gated as on the Docker runtime,
    Slurm's end state as the runtime status with its reason (``slurm_jobs.end_status``). The record keeps
    the job: ``nodes`` Slurm's node list, ``exit_codes`` ``{"job <id>": code}``, ``started_at`` when the job
    started (submitted + queue time) and ``finished_at`` that plus sacct's elapsed run time; ``node_env``
    the digest pyxis imported on each node. ``pinned``: the digest the catalog pins; a node that did not
    import it refuses the trial (LAUNCH_FAILED, as the Docker runtime refuses another digest)."""
    status, reason = slurm_jobs.end_status(st)
    missing = collect_logs(pool, login, log_dir, trial, out_dir)
    if missing and status is None:
        status, reason = TrialStatus.LAUNCH_FAILED, f"slurm job {st.job_id}: no {', '.join(missing)}"
    hosts = batch_hosts(pool, login, log_dir, st.job_id)
    env = image_env(trial, hosts, out_dir)
    refused = slurm_image.refusal(pinned, env, st.job_id)
    if refused and status is None:
        status, reason = TrialStatus.LAUNCH_FAILED, refused
    started = submitted_at + (st.queue_s or 0.0)
    finished = started + st.elapsed_s if st.elapsed_s is not None else time.time()
    res = gate_run_logs(trial, out_dir, exit_codes={f"job {st.job_id}": 0 if status is None else st.exit_code},
                        runtime_status=status, runtime_reason=reason, nodes=[st.nodes] if st.nodes else [],
                        started_at=started, finished_at=max(started, finished))
    res.node_env = env
    res.interconnect = collect_probe(pool, login, log_dir, trial, out_dir, hosts or ([st.nodes] if st.nodes else []))
    return res


@dataclass
class SubmitQueue:
    """A run's trials as Slurm jobs: at most ``max_in_flight`` submitted and not ended."""

    max_in_flight: int = 4
    waiting: list[str] = field(default_factory=list)  # trial ids not yet submitted, in plan order
    jobs: dict[str, str] = field(default_factory=dict)  # trial id -> job id
    ended: dict[str, JobState] = field(default_factory=dict)  # trial id -> final state

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError(f"slurm: max_in_flight must be at least 1, got {self.max_in_flight}")

    def in_flight(self) -> list[str]:
        return [t for t in self.jobs if t not in self.ended]

    def to_submit(self) -> list[str]:
        """The trial ids to submit now (and marks nothing: call :meth:`submitted` with each job id)."""
        room = self.max_in_flight - len(self.in_flight())
        return self.waiting[:max(0, room)]

    def submitted(self, trial_id: str, job_id: str) -> None:
        self.waiting.remove(trial_id)
        self.jobs[trial_id] = job_id

    def update(self, states: dict[str, JobState]) -> list[str]:
        """Record ended jobs; the trial ids that ended in this update."""
        done = []
        for trial_id in self.in_flight():
            st = states.get(self.jobs[trial_id])
            if st is not None and not st.active:
                self.ended[trial_id] = st
                done.append(trial_id)
        return done

    def retry(self, trial_id: str) -> None:
        """Put an ended trial back at the front of the queue (its next attempt)."""
        self.jobs.pop(trial_id, None)
        self.ended.pop(trial_id, None)
        self.waiting.insert(0, trial_id)

    def active_job_ids(self) -> list[str]:
        return [self.jobs[t] for t in self.in_flight()]
