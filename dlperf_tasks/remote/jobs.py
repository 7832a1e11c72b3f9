"""Detached jobs on a node: one fixed shell script, :data:`JOB_SCRIPT`, driven by positional
arguments (the way :mod:`dlperf_tasks.remote.allocation` runs its lease scripts), so no value is
ever spliced into shell text::

    bash -c "$JOB_SCRIPT" dlperf-job start <job dir> [-C cwd] [-m dir]... -- <argv...>
    bash -c "$JOB_SCRIPT" dlperf-job signal <job dir> TERM|KILL|0

``start`` reads the job's secrets from its stdin into ``<dir>/env`` (mode 0600): the job's
environment as NUL-terminated ``NAME=value`` entries, an empty entry, then the bytes the command
gets on its stdin. It starts itself again in ``run`` mode under ``setsid`` and returns at once.
``run`` records its pid (= process group id = session id) in ``<dir>/pid``, exports the
environment, opens the stdin part, deletes both files before the command starts, runs ``argv``
with stdout and stderr appended to ``<dir>/log`` and writes the exit status to ``<dir>/exit``
(atomically, via a rename). ``signal`` sends a signal to the whole process group (never to a
lone pid, never to a pid <= 1); it prints ``hit`` when the group existed. For signal ``0`` (is it
alive?) a group whose members are all zombies is dead: ``hit`` only when a member still runs
(``/proc``; a node whose init reaps orphans late would otherwise keep a killed job "alive" for seconds).

Environment values therefore never appear in any process' command line; the docker runtime
passes a container's environment as ``docker run --env-file /dev/stdin`` with the env file as
the job's stdin (:attr:`JobCommand.stdin`).
"""

from __future__ import annotations

import re
import secrets
import shlex
import time
from dataclasses import dataclass, field
from typing import Mapping

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.ssh import SSHPool

JOB_SCRIPT = r"""
set -u
mode="$1"; dir="$2"; shift 2
case "$mode" in
start)
  cwd=""; mk=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
      -C) cwd="$2"; shift 2 ;;
      -m) mk+=("$2"); shift 2 ;;
      *) echo "dlperf-job: unknown option $1" >&2; exit 2 ;;
    esac
  done
  [ $# -gt 1 ] || { echo "dlperf-job: no command after --" >&2; exit 2; }
  shift
  old_umask=$(umask)
  umask 077
  mkdir -p -- "$dir" && cat > "$dir/env" || exit 3
  umask "$old_umask"
  : > "$dir/log" || exit 3
  for d in ${mk[@]+"${mk[@]}"}; do mkdir -p -- "$d" || exit 3; done
  setsid bash -c "$BASH_EXECUTION_STRING" dlperf-job run "$dir" "$cwd" "$@" </dev/null >/dev/null 2>&1 &
  echo "started ${dir##*/}"
  ;;
run)
  cwd="$1"; shift
  old_umask=$(umask)
  printf '%s' "$$" > "$dir/pid.tmp" && mv -f "$dir/pid.tmp" "$dir/pid"
  umask 077
  if [ -f "$dir/env" ]; then
    { while IFS= read -r -d '' kv && [ -n "$kv" ]; do export "$kv"; done; cat > "$dir/stdin"; } < "$dir/env"
  fi
  : >> "$dir/stdin"
  exec 3< "$dir/stdin"
  rm -f -- "$dir/env" "$dir/stdin"
  umask "$old_umask"
  rc=0
  if [ -n "$cwd" ] && ! cd -- "$cwd" >>"$dir/log" 2>&1; then rc=126; else "$@" <&3 3<&- >>"$dir/log" 2>&1 || rc=$?; fi
  printf '%s' "$rc" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
  ;;
signal)
  p=$(cat "$dir/pid" 2>/dev/null || true)
  case "$p" in ''|*[!0-9]*) exit 0 ;; esac
  [ "$p" -gt 1 ] || exit 0
  kill -s "$1" -- "-$p" 2>/dev/null || exit 0
  [ "$1" = 0 ] || { echo hit; exit 0; }
  for f in "/proc/$p/stat" /proc/[0-9]*/stat; do
    { read -r s < "$f"; } 2>/dev/null || continue
    set -- ${s##*) }
    [ "$3" = "$p" ] && [ "$1" != Z ] && { echo hit; exit 0; }
  done
  [ -d /proc/self ] || echo hit
  exit 0
  ;;
*)
  echo "dlperf-job: unknown mode $mode" >&2; exit 2
  ;;
esac
"""

_SIGNALS = ("TERM", "KILL", "INT", "HUP", "0")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: exit status a ``precheck`` script uses to refuse the start (its stdout says why)
PRECHECK_RC = 28


class PrecheckFailed(RemoteError):
    """The job's precheck refused to start it; the message is the precheck's output."""


@dataclass(frozen=True)
class JobCommand:
    """What a job runs: ``argv`` (no shell), in ``cwd``, after creating ``mkdirs``. ``env`` values
    and ``stdin`` (what the command reads on its standard input) travel in the job's 0600 env
    file (the start's stdin, deleted before the command starts), never in a command line."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    mkdirs: tuple[str, ...] = ()
    stdin: bytes = b""


@dataclass(frozen=True)
class JobPaths:
    """Where a job keeps its files on the node: ``<base_dir>/<job_id>/{log,pid,exit,env}``."""

    job_id: str
    base_dir: str

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,120}", self.job_id) or self.job_id in (".", ".."):
            raise ValueError(f"job id {self.job_id!r}: letters, digits, _ . - only")
        if not self.base_dir.startswith("/"):
            raise ValueError(f"job base directory {self.base_dir!r} must be absolute")

    @property
    def job_dir(self) -> str:
        return f"{self.base_dir.rstrip('/')}/{self.job_id}"

    def file(self, name: str) -> str:
        return f"{self.job_dir}/{name}"

    @property
    def log_file(self) -> str:
        return self.file("log")

    @property
    def pid_file(self) -> str:
        return self.file("pid")

    @property
    def exit_file(self) -> str:
        return self.file("exit")


def new_job_id(prefix: str) -> str:
    """``<prefix with unsafe characters replaced>_<8 random hex>``: unique per start."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', prefix)[:100]}_{secrets.token_hex(4)}"


def jobs_base_dir(workdir: str) -> str:
    return f"{workdir.rstrip('/')}/jobs"


def script_command(mode: str, paths: JobPaths, *args: str) -> str:
    """``bash -c <JOB_SCRIPT> dlperf-job <mode> <dir> <args...>``, every word quoted."""
    words = ["bash", "-c", JOB_SCRIPT, "dlperf-job", mode, paths.job_dir, *args]
    return shlex.join(words)


def start_command(paths: JobPaths, cmd: JobCommand) -> str:
    if not cmd.argv:
        raise ValueError("a job needs a command")
    opts: list[str] = []
    if cmd.cwd:
        opts += ["-C", cmd.cwd]
    for d in cmd.mkdirs:
        opts += ["-m", d]
    return script_command("start", paths, *opts, "--", *cmd.argv)


def env_payload(env: Mapping[str, str], stdin: bytes = b"") -> bytes:
    """What the start reads from its stdin: ``NAME=value\\0`` entries, ``\\0``, then ``stdin``."""
    out = bytearray()
    for k, v in env.items():
        if not _ENV_NAME.match(k):
            raise ValueError(f"invalid environment variable name {k!r}")
        if "\x00" in v:
            raise ValueError(f"environment variable {k}: value contains a NUL byte")
        out += f"{k}={v}".encode() + b"\x00"
    return bytes(out) + b"\x00" + stdin


def signal_command(paths: JobPaths, sig: str) -> str:
    if sig not in _SIGNALS:
        raise ValueError(f"unsupported signal {sig!r}")
    return script_command("signal", paths, sig)


def remove_command(paths: JobPaths) -> str:
    return shlex.join(["rm", "-rf", "--", paths.job_dir])


# ---- operations over SSH ---------------------------------------------------------
@dataclass(frozen=True)
class RemoteJob:
    node: str
    paths: JobPaths

    @property
    def log_file(self) -> str:
        return self.paths.log_file


def start_job(pool: SSHPool, node: str, cmd: JobCommand, job_id: str, base_dir: str | None = None,
              timeout: float = 30.0, precheck: str | None = None) -> RemoteJob:
    """Start ``cmd`` detached on ``node`` and return at once.

    ``precheck`` (a shell script) runs first in the same SSH round trip; when it exits with
    :data:`PRECHECK_RC` nothing is started and :class:`PrecheckFailed` carries its output."""
    paths = JobPaths(job_id, base_dir or jobs_base_dir(pool.cluster.node(node).workdir))
    line = start_command(paths, cmd)
    if precheck:
        line = f"bash -c {shlex.quote(precheck)} </dev/null && {line}"
    res = pool.run(node, line, timeout=timeout, stdin=env_payload(cmd.env, cmd.stdin))
    if precheck and res.rc == PRECHECK_RC:
        raise PrecheckFailed(res.stdout.strip(), node=node)
    if res.rc != 0 or res.stdout.strip() != f"started {job_id}":
        raise RemoteError(f"node {node}: could not start job {job_id} (exit {res.rc}): {res.stderr.strip()[-300:]}",
                          node=node)
    return RemoteJob(node, paths)


def read_log(pool: SSHPool, job: RemoteJob, offset: int, max_bytes: int = 4 << 20) -> bytes:
    """New log bytes from ``offset`` (at most ``max_bytes``; SFTP, one channel per node reused)."""
    return pool.read(job.node, job.paths.log_file, offset, max_bytes) or b""


def exit_code(pool: SSHPool, job: RemoteJob) -> int | None:
    """The job's exit status, or None while it runs."""
    data = pool.read(job.node, job.paths.exit_file)
    try:
        return int(data.strip()) if data else None
    except ValueError:
        return None


def signal_job(pool: SSHPool, job: RemoteJob, sig: str) -> bool:
    """Send ``sig`` to the job's process group; True when the group existed."""
    return "hit" in pool.run(job.node, signal_command(job.paths, sig), timeout=20).stdout


def is_alive(pool: SSHPool, job: RemoteJob) -> bool:
    return signal_job(pool, job, "0")


def kill_job(pool: SSHPool, job: RemoteJob, grace_s: float = 5.0) -> bool:
    """TERM the job's process group, wait up to ``grace_s``, then KILL it. True when the group is gone."""
    deadline = time.monotonic() + 3.0  # the pid file is written by the job itself right after setsid
    while not pool.read(job.node, job.paths.pid_file) and time.monotonic() < deadline:
        if exit_code(pool, job) is not None:
            break
        time.sleep(0.05)
    signal_job(pool, job, "TERM")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not is_alive(pool, job):
            return True
        time.sleep(0.2)
    signal_job(pool, job, "KILL")
    time.sleep(0.1)
    return not is_alive(pool, job)


def remove_job_dir(pool: SSHPool, job: RemoteJob) -> None:
    pool.run(job.node, remove_command(job.paths), timeout=20)
