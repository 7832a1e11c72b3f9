"""Detached remote jobs: start a command under ``setsid`` with a log, a pid (= process
group id) and an exit-code file; read the log by offset; kill the whole process group.

The shell builders below are vendored from apache-airflow-providers-ssh 7.0.1,
``airflow/providers/ssh/utils/remote_job.py`` (Apache License 2.0, Copyright The Apache
Software Foundation). Importing that module directly pulls in ``airflow`` itself
(``airflow.providers.ssh.__init__`` imports ``airflow.__version__``, which loads ~230 Airflow
modules and its configuration, ~1 s), and this layer must not import Airflow, so the few pure
POSIX builders are copied here verbatim in behaviour; tests/unit/test_remote_jobs.py checks
that they produce the same strings as the provider's.

Changes from upstream: the kill builder takes the signal (TERM then KILL escalation) and a
``signal_group_only`` form that never falls back to a single pid; an ``alive`` check builder.
"""

from __future__ import annotations

import re
import secrets
import shlex
import string
import time
from dataclasses import dataclass

from dlperf_tasks.errors import RemoteError
from dlperf_tasks.remote.ssh import SSHPool


def _validate_env_var_name(name: str) -> None:
    if not name:
        raise ValueError("Environment variable name cannot be empty")
    if not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", name):
        raise ValueError(
            f"Invalid environment variable name '{name}'. "
            "Only alphanumeric characters and underscores are allowed, "
            "and the name must start with a letter or underscore."
        )


@dataclass
class RemoteJobPaths:
    """Paths for remote job artifacts on the target system (POSIX only)."""

    job_id: str
    base_dir: str

    @property
    def job_dir(self) -> str:
        return f"{self.base_dir}/{self.job_id}"

    @property
    def log_file(self) -> str:
        return f"{self.job_dir}/stdout.log"

    @property
    def exit_code_file(self) -> str:
        return f"{self.job_dir}/exit_code"

    @property
    def exit_code_tmp_file(self) -> str:
        return f"{self.job_dir}/exit_code.tmp"

    @property
    def pid_file(self) -> str:
        return f"{self.job_dir}/pid"

    @property
    def status_file(self) -> str:
        return f"{self.job_dir}/status"


def build_posix_wrapper_command(command: str, paths: RemoteJobPaths, environment: dict[str, str] | None = None) -> str:
    """Shell wrapper that runs ``command`` detached (vendored, see module docstring).

    The job script records its own pid (== pgid == sid right after ``setsid``), appends
    stdout+stderr to the log and writes the exit code atomically when done.
    """
    env_exports = ""
    if environment:
        for key, value in environment.items():
            _validate_env_var_name(key)
            env_exports += f"export {key}={shlex.quote(value)}\n"
    escaped_job_body = (env_exports + command).replace("'", "'\"'\"'")
    wrapper = f"""set -euo pipefail
job_dir={shlex.quote(paths.job_dir)}
log_file={shlex.quote(paths.log_file)}
exit_code_file={shlex.quote(paths.exit_code_file)}
exit_code_tmp={shlex.quote(paths.exit_code_tmp_file)}
pid_file={shlex.quote(paths.pid_file)}
status_file={shlex.quote(paths.status_file)}

mkdir -p "$job_dir"
: > "$log_file"

job_script='
set +e
echo -n "$$" > "'"$pid_file"'"
export LOG_FILE="'"$log_file"'"
export STATUS_FILE="'"$status_file"'"
{escaped_job_body} >>"'"$log_file"'" 2>&1
ec=$?
echo -n "$ec" > "'"$exit_code_tmp"'"
mv "'"$exit_code_tmp"'" "'"$exit_code_file"'"
exit 0
'

if command -v setsid >/dev/null 2>&1; then
  setsid bash -c "$job_script" </dev/null >/dev/null 2>&1 &
else
  nohup bash -c "$job_script" </dev/null >/dev/null 2>&1 &
fi
echo {shlex.quote(paths.job_id)}
"""
    return wrapper


def build_posix_log_tail_command(log_file: str, offset: int, max_bytes: int) -> str:
    tail_offset = offset + 1
    return f"tail -c +{tail_offset} {shlex.quote(log_file)} 2>/dev/null | head -c {max_bytes} || true"


def build_posix_completion_check_command(exit_code_file: str) -> str:
    quoted = shlex.quote(exit_code_file)
    return f"test -s {quoted} && cat {quoted} || true"


def build_posix_kill_command(pid_file: str, sig: str = "TERM") -> str:
    """Signal the job's whole process group (``kill -SIG -<pgid>``); the pid is validated
    as an integer > 1 first so a corrupt pid file never turns into a broadcast kill.
    Prints ``signalled`` when the group existed."""
    if sig not in ("TERM", "KILL", "INT", "HUP", "0"):
        raise ValueError(f"unsupported signal {sig!r}")
    quoted = shlex.quote(pid_file)
    return (
        f"if test -f {quoted}; then "
        f'p="$(cat {quoted})"; '
        f'if [ "$p" -gt 1 ] 2>/dev/null; then '
        f'kill -{sig} -"$p" 2>/dev/null && echo signalled || true; '
        "fi; fi"
    )


def build_posix_alive_command(pid_file: str) -> str:
    """Prints ``alive`` while any process of the job's process group exists."""
    return build_posix_kill_command(pid_file, "0").replace("echo signalled", "echo alive")


def build_posix_cleanup_command(job_dir: str, base_dir: str) -> str:
    if not job_dir.startswith(base_dir.rstrip("/") + "/"):
        raise ValueError(f"Invalid job directory '{job_dir}'. Expected path under '{base_dir}' for safety.")
    return f"rm -rf {shlex.quote(job_dir)}"


def generate_job_id(prefix: str, suffix_length: int = 8) -> str:
    """``<sanitised prefix>_<random>``: unique per start, safe as a path component."""
    clean = re.sub(r"[^a-zA-Z0-9_.-]", "_", prefix)[:80]
    alphabet = string.ascii_lowercase + string.digits
    return f"{clean}_{''.join(secrets.choice(alphabet) for _ in range(suffix_length))}"


# ---- the job handle ---------------------------------------------------------------
@dataclass
class RemoteJob:
    node: str
    paths: RemoteJobPaths

    @property
    def log_file(self) -> str:
        return self.paths.log_file


def jobs_base_dir(workdir: str) -> str:
    return f"{workdir.rstrip('/')}/jobs"


#: exit status a ``precheck`` script uses to refuse the start (its stdout says why)
PRECHECK_RC = 28


class PrecheckFailed(RemoteError):
    """The job's precheck refused to start it; the message is the precheck's output."""


def start_job(pool: SSHPool, node: str, command: str, job_id: str, environment: dict[str, str] | None = None,
              base_dir: str | None = None, timeout: float = 30.0, precheck: str | None = None) -> RemoteJob:
    """Start ``command`` (a quoted shell string) detached on ``node``; returns at once.

    ``precheck`` (a shell script) runs first in the same SSH round trip; when it exits with
    :data:`PRECHECK_RC` nothing is started and :class:`PrecheckFailed` carries its output."""
    if base_dir is None:
        base_dir = jobs_base_dir(pool.cluster.node(node).workdir)
    paths = RemoteJobPaths(job_id=job_id, base_dir=base_dir)
    wrapper = build_posix_wrapper_command(command, paths, environment)
    cmd = "bash -c " + shlex.quote(wrapper)
    if precheck:
        cmd = "bash -c " + shlex.quote(precheck) + " && " + cmd
    res = pool.run(node, cmd, timeout=timeout)
    if precheck and res.rc == PRECHECK_RC:
        raise PrecheckFailed(res.stdout.strip(), node=node)
    if res.rc != 0 or res.stdout.strip() != job_id:
        raise RemoteError(f"node {node}: could not start job {job_id} (exit {res.rc}): {res.stderr.strip()[-300:]}",
                          node=node)
    return RemoteJob(node, paths)


def read_log(pool: SSHPool, job: RemoteJob, offset: int, max_bytes: int = 4 << 20) -> bytes:
    """New log bytes from ``offset`` (SFTP, one channel per node reused)."""
    return pool.read(job.node, job.paths.log_file, offset, max_bytes) or b""


def exit_code(pool: SSHPool, job: RemoteJob) -> int | None:
    """The job's exit code, or None while it runs."""
    data = pool.read(job.node, job.paths.exit_code_file)
    if not data:
        return None
    try:
        return int(data.strip())
    except ValueError:
        return None


def is_alive(pool: SSHPool, job: RemoteJob) -> bool:
    return "alive" in pool.run(job.node, build_posix_alive_command(job.paths.pid_file), timeout=20).stdout


def kill_job(pool: SSHPool, job: RemoteJob, grace_s: float = 5.0) -> bool:
    """TERM the job's process group, wait up to ``grace_s``, then KILL it. Never a lone ``kill <pid>``.
    Returns True when the group is gone."""
    # the pid file is written asynchronously by the job itself right after setsid
    deadline = time.monotonic() + 3.0
    while pool.read(job.node, job.paths.pid_file) in (None, b"") and time.monotonic() < deadline:
        if exit_code(pool, job) is not None:
            break
        time.sleep(0.05)
    pool.run(job.node, build_posix_kill_command(job.paths.pid_file, "TERM"), timeout=20)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not is_alive(pool, job):
            return True
        time.sleep(0.2)
    pool.run(job.node, build_posix_kill_command(job.paths.pid_file, "KILL"), timeout=20)
    time.sleep(0.1)
    return not is_alive(pool, job)


def remove_job_dir(pool: SSHPool, job: RemoteJob) -> None:
    pool.run(job.node, build_posix_cleanup_command(job.paths.job_dir, job.paths.base_dir), timeout=20)
