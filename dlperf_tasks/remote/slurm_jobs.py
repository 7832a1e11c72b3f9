"""Slurm jobs of a run: submit, poll (``squeue`` + ``sacct`` in one SSH command), cancel, and Slurm's
states mapped to trial statuses.

* :func:`poll_command` asks for every job of a run at once: ``squeue -h -o <fields>`` for the jobs still
  in the queue (pending reason, nodes), then ``sacct -X -n -P`` (``--parsable2``: ``|``-separated, no
  trailing ``|``) for their accounting. :func:`parse_poll` reads both into one :class:`JobState` per id,
  sacct's row winning for ended jobs.
* :func:`end_status` maps an ended job to ``(TrialStatus | None, reason)``: ``None`` when it completed
  with exit code 0 (the logs decide, as on the Docker runtime); TIMEOUT and DEADLINE -> TIMEOUT,
  NODE_FAIL -> NODE_UNREACHABLE, BOOT_FAIL / PREEMPTED / REQUEUED -> LAUNCH_FAILED (all retriable under
  the existing policy), OUT_OF_MEMORY and FAILED -> NONZERO_EXIT with the exit code, CANCELLED -> NOT_RUN.
  The reason always carries Slurm's own state and exit code.
* Queue time (submit -> start) is kept apart from run time (sacct's Elapsed).
* :func:`pending_note` names the pending reason and, for ``ReqNodeNotAvail``, the nodes Slurm reports
  unavailable (drained or down).

Job ids are checked to be numeric before they reach a command line; nothing else from a job is sent back.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Mapping

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.core.model import TrialStatus

#: squeue fields: job id, state, reason, node list, submit time, start time (``%S`` is the expected start while pending)
SQUEUE_FORMAT = "%i|%T|%r|%N|%V|%S"
SACCT_FIELDS = "JobID,JobName,State,ExitCode,Elapsed,NodeList,Submit,Start,End"
_JOB_ID = re.compile(r"^\d{1,12}$")
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
          "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED")
_END_STATUS = {
    "TIMEOUT": TrialStatus.TIMEOUT, "DEADLINE": TrialStatus.TIMEOUT,
    "NODE_FAIL": TrialStatus.NODE_UNREACHABLE,
    "BOOT_FAIL": TrialStatus.LAUNCH_FAILED, "PREEMPTED": TrialStatus.LAUNCH_FAILED,
    "REVOKED": TrialStatus.LAUNCH_FAILED, "SPECIAL_EXIT": TrialStatus.LAUNCH_FAILED,
    "OUT_OF_MEMORY": TrialStatus.NONZERO_EXIT, "FAILED": TrialStatus.NONZERO_EXIT,
    "CANCELLED": TrialStatus.NOT_RUN,
}


@dataclass
class JobState:
    job_id: str
    state: str  # Slurm's base state (``CANCELLED by 1000`` -> CANCELLED)
    reason: str = ""  # squeue's pending reason, or sacct's ``by <uid>`` text
    nodes: str = ""  # Slurm's node list expression, e.g. node[1-2]
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: float | None = None  # run time
    queue_s: float | None = None  # submit -> start
    source: str = "squeue"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_dict(self) -> dict:
        return asdict(self)


def check_job_ids(ids) -> list[str]:
    out = [str(i) for i in ids]
    for i in out:
        if not _JOB_ID.match(i):
            raise RemoteError(f"slurm: job id {i!r} is not a number (sbatch --parsable printed something else?)")
    return out


def parse_submit(stdout: str) -> str:
    """``sbatch --parsable`` prints ``<id>`` or ``<id>;<cluster>``."""
    line = (stdout.strip().splitlines() or [""])[-1]
    job_id = line.split(";", 1)[0].strip()
    if not _JOB_ID.match(job_id):
        raise RemoteError(f"slurm: sbatch printed {line[:200]!r}, not a job id")
    return job_id


def poll_command(ids) -> str:
    """One shell command for every job of a run: squeue's rows, a marker line, sacct's rows."""
    joined = ",".join(check_job_ids(ids))
    return (f"squeue -h -j {joined} -o {shlex.quote(SQUEUE_FORMAT)} 2>/dev/null; echo @@sacct; "
            f"sacct -X -n -P -j {joined} -o {SACCT_FIELDS}")


def own_jobs_command() -> str:
    """Every job of the login user still in the queue: ``<id>|<name>`` per line."""
    return "squeue -h -u \"$(id -un)\" -o '%i|%j'"


def parse_own_jobs(stdout: str) -> list[tuple[str, str]]:
    out = []
    for line in stdout.splitlines():
        job_id, _, name = line.strip().partition("|")
        if _JOB_ID.match(job_id):
            out.append((job_id, name))
    return out


def node_states_command(nodes: str) -> str:
    """sinfo's state and reason of the nodes of a Slurm node list (``node[1-2]``): ``<node>|<state>|<reason>``."""
    if not re.match(r"^[A-Za-z0-9_.,\[\]-]{1,2000}$", nodes):
        raise RemoteError(f"slurm: {nodes[:100]!r} is not a node list")
    return f"sinfo -h -N -n {shlex.quote(nodes)} -o '%N|%T|%E'"


#: sinfo states (%T, extended form, lower case) in which Slurm places no new job on a node; a trailing ``*``
#: (not responding) does the same (sinfo(1), NODE STATE CODES)
UNUSABLE_STATES = ("down", "drain", "fail", "maint", "unknown", "inval", "no_respond", "power", "future")


def unusable_state(state: str) -> bool:
    """Whether Slurm places no new job on a node in sinfo state ``state`` (down, drained or draining,
    failing, in maintenance, powered down, not responding...)."""
    return state.endswith("*") or any(b in state.lower() for b in UNUSABLE_STATES)


def node_note(name: str, state: str, reason: str = "") -> str:
    """``node3 is down* (Not responding)``: a node, its sinfo state and the reason Slurm keeps for it."""
    return f"{name} is {state}" + (f" ({reason})" if reason and reason != "none" else "")


def unavailable_nodes(stdout: str) -> list[str]:
    """:func:`node_note` for each row of :func:`node_states_command` whose node Slurm reports down,
    drained, failing or not responding (``*``)."""
    out = []
    for line in stdout.splitlines():
        name, state, reason = (line.strip().split("|") + ["", "", ""])[:3]
        if name and unusable_state(state):
            text = node_note(name, state, reason)
            if text not in out:
                out.append(text)
    return out


@dataclass(frozen=True)
class PartitionNode:
    """One row of :func:`partition_nodes_command`: a node of the partition as sinfo shows it."""
    name: str
    state: str   # sinfo's %T, e.g. idle, mixed, allocated, drained, down*
    gpus: int    # GPUs in its gres (%G)
    reason: str  # why it is unavailable (%E; ``none`` when it is not)

    @property
    def usable(self) -> bool:
        return not unusable_state(self.state)

    @property
    def idle(self) -> bool:
        return self.state.rstrip("*~#!%$@^-").lower() == "idle"


def partition_nodes_command(partition: str) -> str:
    """One row per node of the partition: ``<node>|<state>|<gres>|<reason>`` (``sinfo -N``: node-oriented)."""
    if not re.match(r"^[A-Za-z0-9_.-]{1,128}$", partition):
        raise RemoteError(f"slurm: {partition[:100]!r} is not a partition name")
    return f"sinfo -h -N -p {shlex.quote(partition)} -o '%N|%T|%G|%E'"


def gpu_count(gres: str) -> int:
    """GPUs in a sinfo %G value: ``gpu:8``, ``gpu:a100:4(S:0-1)``, ``gpu:a100:4,gpu:v100:4`` -> 8/4/8."""
    total = 0
    for part in gres.split(","):
        fields = re.sub(r"\(.*?\)", "", part).split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def parse_partition_nodes(stdout: str) -> list[PartitionNode]:
    """The rows of :func:`partition_nodes_command`, in sinfo's order, each node once."""
    out: dict[str, PartitionNode] = {}
    for line in stdout.splitlines():
        name, state, gres, reason = (line.strip().split("|") + ["", "", "", ""])[:4]
        if name and name not in out:
            out[name] = PartitionNode(name, state, gpu_count(gres), reason)
    return list(out.values())


def choose_nodes(rows: list[PartitionNode], gpus: int, avoid: Mapping[str, str],
                 only: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The nodes a pinned run may use, idle ones first (then sinfo's order), and why each other one may
    not (``node3 is down* (Not responding)``, ``node1 quarantined (...)``): a node is left out when Slurm
    places no job there, it has fewer than ``gpus`` GPUs, or it is in ``avoid`` (name -> why: quarantined,
    the cluster file's exclude). ``only``: the candidates (a plan's own nodes), in that order; one the
    partition lacks is named."""
    by_name = {r.name: r for r in rows}
    names = list(only) if only else [r.name for r in rows]
    ok, left_out = [], []
    for n in names:
        r = by_name.get(n)
        if r is None:
            left_out.append(f"{n} is not in the partition")
        elif n in avoid:
            left_out.append(f"{n} {avoid[n]}")
        elif not r.usable:
            left_out.append(node_note(r.name, r.state, r.reason))
        elif r.gpus < gpus:
            left_out.append(f"{n} has {r.gpus} GPU(s)")
        else:
            ok.append(r)
    if not only:
        ok.sort(key=lambda r: not r.idle)  # stable: sinfo's order within idle and busy nodes
    return [r.name for r in ok], left_out


def pinned_nodes_command(partition: str, nodes) -> str:
    """The partition's node names, a marker line, then the names of ``nodes`` (Slurm node lists such as
    ``node[3-4]``, as a trial record keeps them) expanded by ``scontrol show hostnames``."""
    joined = ",".join(nodes)
    if not re.match(r"^[A-Za-z0-9_.,\[\]-]{1,2000}$", joined) or not re.match(r"^[A-Za-z0-9_.-]{1,128}$", partition):
        raise RemoteError(f"slurm: {joined[:100]!r} in partition {partition[:100]!r} is not a node list")
    return f"sinfo -h -N -p {shlex.quote(partition)} -o %N; echo @@pinned; scontrol show hostnames {shlex.quote(joined)}"


def outside_pinned(stdout: str, partition: str) -> list[str]:
    """The partition's nodes not among the pinned ones (what ``--exclude`` gets, so Slurm places every job
    on the pinned nodes only, as many of them as the job asks for); a pinned node the partition does not
    have is an error naming it."""
    part_text, _, pinned_text = stdout.partition("@@pinned")
    part, pinned = set(part_text.split()), set(pinned_text.split())
    if not pinned:
        raise RemoteError(f"slurm: no pinned node names from scontrol show hostnames ({stdout.strip()[-200:]!r})")
    missing = sorted(pinned - part)
    if missing:
        raise RemoteError(f"slurm: pinned node(s) {', '.join(missing)} not in partition {partition}")
    return sorted(part - pinned)


def cancel_command(ids) -> str:
    return "scancel " + " ".join(check_job_ids(ids)) if ids else "true"


def duration_s(text: str) -> float | None:
    """Slurm's ``[D-]HH:MM:SS`` / ``MM:SS`` (``.mmm`` allowed); None when blank or unknown."""
    text = (text or "").strip()
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.(\d+))?$", text)
    if not m:
        return None
    days, hours, mins, secs, frac = m.groups()
    total = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(mins) * 60 + int(secs)
    return total + (float(f"0.{frac}") if frac else 0.0)


def _time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:  # Unknown, None, N/A
        return None


def _queue_s(submit: str, start: str) -> float | None:
    a, b = _time(submit), _time(start)
    return max(0.0, (b - a).total_seconds()) if a and b else None


def base_state(text: str) -> tuple[str, str]:
    """``CANCELLED by 1000`` -> (``CANCELLED``, ``by 1000``); ``RUNNING+`` style suffixes are dropped."""
    state, _, rest = text.strip().partition(" ")
    return state.rstrip("+"), rest.strip()


def parse_squeue(text: str) -> dict[str, JobState]:
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 6 or not _JOB_ID.match(parts[0].strip()):
            continue
        job_id, state, reason, nodes, submit, start = (p.strip() for p in parts)
        st = JobState(job_id, base_state(state)[0], reason="" if reason == "None" else reason, nodes=nodes)
        if st.state != "PENDING":
            st.queue_s = _queue_s(submit, start)
        out[job_id] = st
    return out


def parse_sacct(text: str) -> dict[str, JobState]:
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 9 or not _JOB_ID.match(parts[0].strip()):
            continue  # job steps (123.batch) are not asked for (-X); anything else is not ours
        job_id, _name, state, exit_code, elapsed, nodes, submit, start, _end = (p.strip() for p in parts)
        base, rest = base_state(state)
        code, _, sig = exit_code.partition(":")
        st = JobState(job_id, base, reason=rest, nodes="" if nodes == "None assigned" else nodes,
                      exit_code=int(code) if code.isdigit() else None, signal=int(sig) if sig.isdigit() else None,
                      elapsed_s=duration_s(elapsed), queue_s=_queue_s(submit, start), source="sacct")
        out[job_id] = st
    return out


def parse_poll(stdout: str) -> dict[str, JobState]:
    """squeue's rows, then sacct's: an ended job takes sacct's row; a queued one keeps squeue's pending
    reason with sacct's accounting (accounting may lag a few seconds behind the queue)."""
    queue_text, _, acct_text = stdout.partition("@@sacct")
    queued, acct = parse_squeue(queue_text), parse_sacct(acct_text)
    out = dict(acct)
    for job_id, st in queued.items():
        if job_id in acct and not acct[job_id].active:
            continue
        if job_id in acct:
            st.elapsed_s = acct[job_id].elapsed_s
        out[job_id] = st
    return out


def end_status(st: JobState) -> tuple[TrialStatus | None, str]:
    """An ended job's trial status (None: completed with exit 0, the logs decide) and the reason kept."""
    if st.active:
        raise ValueError(f"slurm job {st.job_id} has not ended ({st.state})")
    code = f" exit code {st.exit_code}" if st.exit_code is not None else ""
    sig = f" signal {st.signal}" if st.signal else ""
    if st.state == "COMPLETED" and not st.exit_code:
        return None, ""
    status = _END_STATUS.get(st.state, TrialStatus.NONZERO_EXIT)
    extra = f" ({st.reason})" if st.reason else ""
    where = f" on {st.nodes}" if st.nodes else ""
    return status, f"slurm job {st.job_id} {st.state}{extra}{code}{sig}{where}"


def pending_note(st: JobState) -> str:
    """What a progress line says of a queued job: ``pending (Resources)``, naming unavailable nodes."""
    if st.state != "PENDING":
        return st.state.lower()
    reason = st.reason or "unknown reason"
    m = re.search(r"UnavailableNodes:(\S+)", reason)
    if m:
        return f"pending (ReqNodeNotAvail: node(s) {m.group(1)} drained or down)"
    return f"pending ({reason})"


def with_allocation(st: JobState, allocated: str) -> JobState:
    """An ended job's state with the node list seen while it ran (``allocated``, squeue's while RUNNING):
    sacct's row right at the end may name only the nodes still completing (``node1`` of ``node[1-2]``)."""
    if allocated and st.nodes != allocated:
        return dataclasses.replace(st, nodes=allocated)
    return st


def trial_record(st: JobState) -> dict:
    """What the trial record keeps of its job: id, node list, sacct state, exit code, queue and run time."""
    return {"job_id": st.job_id, "nodes": st.nodes, "state": st.state, "exit_code": st.exit_code,
            "queue_s": st.queue_s, "elapsed_s": st.elapsed_s}

