"""A trial as a Slurm job: the ``sbatch`` command line and the batch script (pure, no I/O).

* ``sbatch --parsable`` with the cell's nodes and GPUs, ``--exclusive``, a job name carrying the run id
  and the trial key (reduced to ``[A-Za-z0-9_.-]``), partition / account / QoS / reservation / time
  limit from the cluster file, ``--exclude`` for quarantined nodes. The script goes on ``sbatch``'s stdin.
* The batch script resolves the node list once (``scontrol show hostnames "$SLURM_JOB_NODELIST"``):
  ``MASTER_ADDR`` is the first host, ``DLPERF_HOST_<k>`` the k-th, exported to every step.
* Launch, one ``srun`` per job step, the way Slurm users write it:
  ``per_node`` frameworks (torchrun, ``torch.distributed.launch``, TF, Megatron): one task per node
  running that node's command (picked by ``$SLURM_NODEID``); ``mpi`` frameworks (the seeds' mpirun /
  Horovod): ``srun --mpi=pmix`` with one task per GPU running the script mpirun would have started.
* Containers: ``pyxis`` (``--container-image=<image@digest>``, ``--container-mounts``,
  ``--container-workdir``: options of NVIDIA/pyxis's README), ``apptainer`` / ``singularity``
  (``apptainer exec --nv docker://<image>``), ``none`` (software on the nodes).
* The interconnect probe (multi-node cells whose suite declares one): nccl-tests ``all_reduce_perf``
  as a step before training, ``srun --mpi=pmix`` with one task per GPU in the same image (as NVIDIA's
  CloudAI guide runs ``srun --mpi=pmix --container-image=... all_reduce_perf_mpi``), its output in
  ``<log dir>/probe.log``, what its verdict needs in ``probe.json``; its failure never stops the job.
* Telemetry samplers run as an overlapping step (``srun --overlap``) on every node, stopped after the
  training step. Per-rank output goes to the shared log directory (``%n`` = node id), which the
  runtime copies into the run dir afterwards.

Every value from a catalog or a cluster file is quoted with :func:`shlex.quote`; the node addresses,
only known inside the job, enter the commands as ``"${DLPERF_HOST_<k>}"`` in place of placeholders.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from dlperf_tasks.core.errors import PlanError
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec
from dlperf_tasks.remote.slurm_inventory import enroot_uri

CONTAINER_MODES = ("pyxis", "apptainer", "singularity", "none")
#: a placeholder address a framework's launch gets for node k; replaced by ``"${DLPERF_HOST_<k>}"``
_HOST_MARK = "dlperf-slurm-host-{}"
_HOST_RE = re.compile(r"dlperf-slurm-host-(\d+)")
_STEP_END = "DLPERF_STEP_END"
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.:+-]{1,128}$")
_TIME = re.compile(r"^(\d+-)?\d{1,4}(:\d{2}){0,2}$")
#: mpirun options the seeds' launches use and how many words follow each; srun --mpi=pmix replaces them
_MPIRUN_ARITY = {"--allow-run-as-root": 0, "-np": 1, "-n": 1, "-H": 1, "-host": 1, "-bind-to": 1,
                 "--bind-to": 1, "-map-by": 1, "--map-by": 1, "-x": 1, "-mca": 2, "--mca": 2,
                 "--tag-output": 0, "-oversubscribe": 0, "--oversubscribe": 0}


@dataclass(frozen=True)
class SlurmOptions:
    """What the cluster file says about submitting a trial (``scheduler: slurm``)."""

    shared_dir: str  # the run's work directory on the cluster filesystem (every node sees it)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    time_limit: str | None = None  # sbatch --time: MM, HH:MM:SS or D-HH:MM:SS
    container: str = "none"
    mounts: tuple[str, ...] = ()  # extra SRC:DST[:FLAGS] for pyxis / apptainer
    exclude: tuple[str, ...] = ()  # quarantined node names
    gres: bool = True  # ask for --gpus-per-node (clusters without GPU gres set it False)
    mpi: str = "pmix"  # srun --mpi= for the suites the seeds launched with mpirun
    interconnect_probe: Any = None  # the cluster file's interconnect_probe (docs/interconnect-probe.md)

    def __post_init__(self) -> None:
        for key in ("partition", "account", "qos", "reservation"):
            value = getattr(self, key)
            if value is not None and not _SLURM_WORD.match(value):
                raise PlanError(f"slurm: {key} {value!r} is not a Slurm name ([A-Za-z0-9_.:+-], at most 128)")
        if self.time_limit is not None and not _TIME.match(str(self.time_limit)):
            raise PlanError(f"slurm: time_limit {self.time_limit!r} is not MM, HH:MM:SS or D-HH:MM:SS")
        if self.mpi not in ("pmix", "pmi2", "none"):
            raise PlanError(f"slurm: mpi {self.mpi!r} is not pmix, pmi2 or none")
        if self.container not in CONTAINER_MODES:
            raise PlanError(f"slurm: container {self.container!r} is not one of {', '.join(CONTAINER_MODES)}")
        if not self.shared_dir.startswith("/") or any(ord(c) < 32 for c in self.shared_dir):
            raise PlanError(f"slurm: shared_dir {self.shared_dir!r} must be an absolute path")
        for n in self.exclude:
            if not _SLURM_WORD.match(n):
                raise PlanError(f"slurm: node name {n!r} to exclude is not a Slurm node name")
        for m in self.mounts:
            if "," in m or any(ord(c) < 32 for c in m):
                raise PlanError(f"slurm: mount {m!r} must be SRC:DST[:FLAGS] without commas")


def options_of(settings, quarantined=()) -> SlurmOptions:
    """The submission options of a cluster file's ``slurm:`` section (``slurm_inventory.SlurmSettings``),
    its ``exclude`` list joined by the quarantined nodes."""
    return SlurmOptions(shared_dir=settings.work_dir, partition=settings.partition, account=settings.account,
                        qos=settings.qos, reservation=settings.reservation, time_limit=settings.time_limit,
                        container=settings.container, mpi=settings.mpi,
                        interconnect_probe=getattr(settings, "interconnect_probe", None),
                        exclude=tuple(sorted({*settings.exclude, *quarantined})))


@dataclass(frozen=True)
class ProbeStep:
    """The interconnect probe as the job's first step (multi-node cells): nccl-tests' mpirun launch
    (``frameworks/_nccl_probe.py``, its ``mpirun`` replaced by ``srun --mpi``), what the verdict needs
    (written to ``<log dir>/probe.json``; ``{"error": ...}`` alone when the settings were refused and no
    step runs) and the step's time limit."""

    spec: LaunchSpec | None
    verdict: dict[str, Any]
    time_s: int = 600


@dataclass
class SlurmJob:
    """One trial attempt as submitted: ``sbatch`` argv (the script on its stdin), the script, where its
    logs land on the shared filesystem, and each ``srun`` line (what the dry run prints)."""

    name: str
    sbatch_argv: list[str]
    script: str
    log_dir: str
    srun_lines: list[str] = field(default_factory=list)


def job_name(run_id: str, trial_key: str, attempt: int) -> str:
    """``dlperf.<run id>.<trial key>.a<attempt>`` in Slurm-safe characters (squeue shows it)."""
    text = f"dlperf.{run_id}.{trial_key}.a{attempt}"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:200]


def run_prefix(run_id: str) -> str:
    """The start of every job name of a run (:func:`job_name`): ``dlperf.<run id>.``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"dlperf.{run_id}.")


def trial_prefix(run_id: str, trial_key: str) -> str:
    """The start of the job names of every attempt of one trial: ``dlperf.<run id>.<trial key>.a``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"dlperf.{run_id}.{trial_key}.a")[:200]


def placeholder_nodes(count: int, gpus: int, interface: str | None = None) -> list[NodeSpec]:
    """Node specs a framework's launch gets on Slurm: addresses are placeholders for the hosts Slurm gives."""
    return [NodeSpec(name=f"node{k}", address=_HOST_MARK.format(k), gpus=gpus, interface=interface)
            for k in range(count)]


def quote_word(word: str) -> str:
    """:func:`shlex.quote`, with node placeholders turned into ``"${DLPERF_HOST_<k>}"`` expansions."""
    quoted = shlex.quote(word)
    if not _HOST_RE.search(word):
        return quoted
    inside_single = quoted.startswith("'")
    sub = (lambda m: f"'\"${{DLPERF_HOST_{m.group(1)}}}\"'") if inside_single else \
        (lambda m: f"\"${{DLPERF_HOST_{m.group(1)}}}\"")
    return _HOST_RE.sub(sub, quoted)


def command_line(spec: LaunchSpec, extra_env: dict[str, str] | None = None) -> str:
    """``cd DIR && env K=V ... argv``, every word quoted."""
    env = {**spec.env, **(extra_env or {})}
    words = (["env", *[f"{k}={v}" for k, v in env.items()]] if env else []) + list(spec.argv)
    line = " ".join(quote_word(w) for w in words)
    return f"cd {quote_word(spec.workdir)} && {line}" if spec.workdir else line


def mpi_script_argv(argv: list[str], mpirun: str = "mpirun") -> tuple[list[str], list[str]]:
    """Split a seed's ``[prefix..., mpirun, options..., script...]`` into (prefix, script): under Slurm
    ``srun --mpi=pmix`` starts the script once per rank. An mpirun option with no Slurm meaning
    known here is refused with its name."""
    names = {mpirun, "mpirun", "mpiexec"}
    at = next((i for i, w in enumerate(argv) if w in names or w.rsplit("/", 1)[-1] in names), None)
    if at is None:
        raise PlanError("slurm: an mpi framework's launch has no mpirun to replace with srun --mpi=pmix")
    i = at + 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] not in _MPIRUN_ARITY:
            raise PlanError(f"slurm: mpirun option {argv[i]!r} has no srun equivalent here; "
                            f"drop it from the suite's mpi_args for a Slurm cluster")
        i += 1 + _MPIRUN_ARITY[argv[i]]
    return argv[:at], argv[i:]


def container_flags(opts: SlurmOptions, image: str | None, workdir: str | None) -> list[str]:
    """pyxis's srun options for a step (empty for apptainer / none)."""
    if opts.container != "pyxis":
        return []
    if not image:
        raise PlanError("slurm: container mode pyxis needs the suite's image")
    mounts = [f"{opts.shared_dir}:{opts.shared_dir}", *opts.mounts]
    flags = [f"--container-image={enroot_uri(image)}", f"--container-mounts={','.join(mounts)}"]
    if workdir:
        flags.append(f"--container-workdir={workdir}")
    return flags


def wrap_command(opts: SlurmOptions, image: str | None, line: str) -> str:
    """The command a step's task runs: plain, or inside ``apptainer exec --nv`` (pyxis wraps at srun)."""
    if opts.container in ("apptainer", "singularity"):
        if not image:
            raise PlanError(f"slurm: container mode {opts.container} needs the suite's image")
        binds = [f"--bind={m}" for m in (f"{opts.shared_dir}:{opts.shared_dir}", *opts.mounts)]
        return shlex.join([opts.container, "exec", "--nv", *binds, f"docker://{image}", "bash", "-c", line])
    return line


def sbatch_argv(opts: SlurmOptions, name: str, nodes: int, gpus_per_node: int, log_dir: str) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--nodes={nodes}", "--exclusive",
            f"--output={log_dir}/slurm-%j.out"]
    if opts.gres and gpus_per_node:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    for key, flag in (("partition", "--partition"), ("account", "--account"), ("qos", "--qos"),
                      ("reservation", "--reservation"), ("time_limit", "--time")):
        if getattr(opts, key):
            argv.append(f"{flag}={getattr(opts, key)}")
    if opts.exclude:
        argv.append(f"--exclude={','.join(sorted(opts.exclude))}")
    return argv


def _probe_lines(opts: SlurmOptions, probe: ProbeStep, *, log_dir: str, nodes: int, gpus_per_node: int,
                 image: str | None, env: dict[str, str], export: list[str], mpirun: str) -> tuple[list[str], str | None]:
    """The batch script's lines of the probe step (before training; its failure never stops the job)."""
    lines = [f"cat > {shlex.quote(log_dir + '/probe.json')} <<'{_STEP_END}'", json.dumps(probe.verdict, sort_keys=True),
             _STEP_END]
    if probe.spec is None:
        return lines, None
    prefix, script = mpi_script_argv(list(probe.spec.argv), mpirun)
    task = command_line(LaunchSpec(argv=prefix + script, env=probe.spec.env, workdir=probe.spec.workdir), env)
    if opts.container == "pyxis":
        task = "export PATH\n" + task
    elif opts.container in ("apptainer", "singularity"):
        task = wrap_command(opts, image, task)
    if _STEP_END in task.splitlines():
        raise PlanError(f"slurm: the probe command contains a line {_STEP_END!r}")
    step_file = f"{log_dir}/probe.sh"
    step = ["srun", f"--nodes={nodes}", f"--mpi={opts.mpi}", f"--ntasks-per-node={gpus_per_node}",
            f"--time={max(1, -(-probe.time_s // 60))}", f"--output={log_dir}/probe.log", *export,
            *container_flags(opts, image, probe.spec.workdir)]
    srun = " ".join(quote_word(w) for w in step) + " /bin/bash " + shlex.quote(step_file)
    lines += [f"cat > {shlex.quote(step_file)} <<'{_STEP_END}'", task, _STEP_END, srun,
              'echo "dlperf-probe-exit: $?"']
    return lines, srun


def render_job(opts: SlurmOptions, *, run_id: str, trial_key: str, attempt: int, launch_mode: str,
               specs: list[LaunchSpec], nodes: int, gpus_per_node: int, image: str | None,
               env: dict[str, str] | None = None, telemetry: list[str] | None = None,
               mpirun: str = "mpirun", probe: ProbeStep | None = None) -> SlurmJob:
    """The job of one trial attempt. ``specs`` are the frameworks' launches for the placeholder nodes
    (:func:`placeholder_nodes`): one per node for ``per_node``, node 0's only for ``mpi``.
    ``env`` is added to every rank (``DLPERF_OUT``, the trial key); ``telemetry`` are sampler shell
    commands, each run on every node as an overlapping step writing ``<log dir>/telemetry/``. ``probe``:
    the interconnect probe, a step before training on multi-node jobs (:class:`ProbeStep`)."""
    if launch_mode not in ("per_node", "mpi"):
        raise PlanError(f"slurm: unknown launch mode {launch_mode!r}")
    name = job_name(run_id, trial_key, attempt)
    log_dir = f"{opts.shared_dir.rstrip('/')}/runs/{re.sub(r'[^A-Za-z0-9_.-]', '-', run_id)}/{name}"
    env = {**(env or {}), "DLPERF_OUT": log_dir}
    step = ["srun", f"--nodes={nodes}", "--kill-on-bad-exit=1"]
    if launch_mode == "per_node":
        step += ["--ntasks-per-node=1", f"--output={log_dir}/rank-node%n.log"]
        workdir = specs[0].workdir
        body = "\n".join(f"  {k}) {command_line(s, env)} ;;" for k, s in enumerate(specs))
        task = f'case "$SLURM_NODEID" in\n{body}\n  *) echo "no command for node $SLURM_NODEID" >&2; exit 2 ;;\nesac'
    else:
        prefix, script = mpi_script_argv(list(specs[0].argv), mpirun)
        step += [f"--mpi={opts.mpi}", f"--ntasks-per-node={gpus_per_node}",
                 f"--output={log_dir}/rank-node0.log"]  # one file for every rank, as mpirun's own output
        workdir = specs[0].workdir
        task = command_line(LaunchSpec(argv=prefix + script, env=specs[0].env, workdir=workdir), env)
    if _STEP_END in task.splitlines():
        raise PlanError(f"slurm: a launch command contains a line {_STEP_END!r}")
    export = []
    if opts.container == "pyxis":  # the image's own environment (PATH...), not the login shell's
        task = "export PATH  # bash's default when the image's environment has none\n" + task
        export = ["--export=" + ",".join(["MASTER_ADDR", *[f"DLPERF_HOST_{k}" for k in range(nodes)]])]
        step += export
    step += container_flags(opts, image, workdir)
    step_file = f"{log_dir}/step.sh"
    srun_train = " ".join(quote_word(w) for w in step) + " /bin/bash " + shlex.quote(step_file)
    lines = ["#!/bin/bash", "set -u",
             f"mkdir -p {shlex.quote(log_dir)}/telemetry",
             'mapfile -t DLPERF_HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
             'for k in "${!DLPERF_HOSTS[@]}"; do export "DLPERF_HOST_$k=${DLPERF_HOSTS[$k]}"; done',
             'export MASTER_ADDR="${DLPERF_HOSTS[0]}"',
             'echo "dlperf-nodes: ${DLPERF_HOSTS[*]}"',
             f"cat > {shlex.quote(step_file)} <<'{_STEP_END}'",
             wrap_command(opts, image, task) if opts.container in ("apptainer", "singularity") else task,
             _STEP_END]
    srun_lines = []
    if probe is not None and nodes > 1:
        plines, psrun = _probe_lines(opts, probe, log_dir=log_dir, nodes=nodes, gpus_per_node=gpus_per_node,
                                     image=image, env=env, export=export, mpirun=mpirun)
        lines += plines
        srun_lines += [psrun] if psrun else []
    samplers = []
    for i, cmd in enumerate(telemetry or []):
        tel = ["srun", "--overlap", f"--nodes={nodes}", "--ntasks-per-node=1",
               f"--output={log_dir}/telemetry/sampler{i}-node%n.log", "bash", "-c", cmd]
        samplers.append(shlex.join(tel) + " &")
        samplers.append(f"DLPERF_SAMPLER_{i}=$!")
        srun_lines.append(shlex.join(tel))
    lines += samplers
    srun_lines.append(srun_train)
    lines += [srun_train, "rc=$?"]
    lines += [f'kill "$DLPERF_SAMPLER_{i}" 2>/dev/null' for i in range(len(telemetry or []))]
    lines += ["wait", 'echo "dlperf-exit: $rc"', 'exit "$rc"', ""]
    argv = sbatch_argv(opts, name, nodes, gpus_per_node, log_dir)
    return SlurmJob(name=name, sbatch_argv=argv, script="\n".join(lines), log_dir=log_dir, srun_lines=srun_lines)
