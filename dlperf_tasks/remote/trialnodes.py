"""The per-node parts of a trial (:mod:`dlperf_tasks.remote.trial` drives them): starting each
node's detached job with its free-space precheck, the MPI helper containers, polling a node's
exit code and log, killing, cleanup and the final log collection."""

from __future__ import annotations

import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from dlperf_tasks.core.errors import DlperfError, RemoteError
from dlperf_tasks.core.model import Trial
from dlperf_tasks.remote import jobs
from dlperf_tasks.remote.runtime import DockerRuntime, HostRuntime
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.remote.watch import NodeLog

#: exit codes of ``docker run`` / the shell meaning "could not start" (daemon error, not executable, not found)
LAUNCH_EXIT_CODES = (125, 126, 127)
#: marker for a job whose process group vanished without writing an exit code
VANISHED = -999
#: a node's log/job directories need at least this much free space (KiB) before a trial starts there
MIN_FREE_KIB = 1024


class LaunchError(DlperfError):
    pass


@dataclass
class NodeRun:
    rank: int
    name: str
    job: jobs.RemoteJob | None = None
    log: NodeLog | None = None
    exit_code: int | None = None
    first_error_at: float | None = None
    last_error: str = ""
    unreachable: bool = False
    log_complete: bool = False

    def error(self, exc: Exception, now: float, grace_s: float) -> None:
        """An SSH failure while polling: unreachable once failures last ``grace_s``."""
        if self.first_error_at is None:
            self.first_error_at = now
        self.last_error = str(exc)
        if now - self.first_error_at >= grace_s:
            self.unreachable = True

    def poll(self, pool: SSHPool) -> int:
        """Exit code first, then the new log bytes (so an exited job's log is read to its end).
        Returns how many new bytes came."""
        code = jobs.exit_code(pool, self.job)
        got = self.log.pull(self._reader(pool))
        if code is not None:
            got += self.log.pull(self._reader(pool), max_chunks=0)
            self.exit_code, self.log_complete = code, True
        self.first_error_at = None
        return got

    def read_rest(self, pool: SSHPool, notes: list[str]) -> None:
        """Finish reading the log (what the poll loop has not read yet)."""
        if self.job is None or self.log is None or self.unreachable or self.log_complete:
            return
        try:
            self.log.pull(self._reader(pool), max_chunks=0)
            self.log_complete = True
        except RemoteError as exc:
            notes.append(f"log of node {self.name} may be incomplete: {exc}")

    def _reader(self, pool: SSHPool) -> Callable[[int, int], bytes]:
        return lambda offset, n: jobs.read_log(pool, self.job, offset, n)

    def exit_text(self) -> str:
        if self.exit_code == VANISHED:
            return f"node {self.name}: the job's processes vanished without an exit code"
        if self.exit_code in LAUNCH_EXIT_CODES:
            return f"node {self.name} could not start the trial (exit {self.exit_code})"
        return f"node {self.name} exited with code {self.exit_code}"


def space_check_script(paths: list[str]) -> str:
    """Shell: for each path (or its nearest existing parent) print ``path|<df line>`` and exit
    jobs.PRECHECK_RC when a filesystem has less than MIN_FREE_KIB free."""
    walk = "".join(f'p={shlex.quote(p)}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; '
                   f'line="$p|$(df -Pk "$p" | tail -1)"; '
                   f'a=$(df -Pk "$p" | tail -1 | awk \'{{print $4}}\'); '
                   f'case "$a" in ""|*[!0-9]*) ;; *) if [ "$a" -lt {MIN_FREE_KIB} ]; then echo "$line"; bad=1; fi;; esac; '
                   for p in paths)
    return f"bad=0; {walk}if [ $bad = 1 ]; then exit {jobs.PRECHECK_RC}; fi; exit 0"


def raise_no_space(node: str, output: str) -> None:
    for line in output.splitlines():
        path, _, df = line.partition("|")
        cols = df.split()
        if len(cols) >= 4 and cols[3].isdigit():
            raise LaunchError(f"node {node}: No space left on device for the trial's logs in {path} "
                              f"({cols[3]} KiB free on the filesystem mounted at {cols[5] if len(cols) > 5 else '?'})")
    raise LaunchError(f"node {node}: the start precheck refused the trial: {output[-300:]}")


def start_node_job(pool: SSHPool, nr: NodeRun, cmd: jobs.JobCommand, job_prefix: str, workdir: str,
                   run_dir: str) -> None:
    """Start the node's job; the free-space check rides along in the start's SSH round trip."""
    try:
        nr.job = jobs.start_job(pool, nr.name, cmd, jobs.new_job_id(job_prefix),
                                precheck=space_check_script([jobs.jobs_base_dir(workdir), run_dir]))
    except jobs.PrecheckFailed as exc:
        raise_no_space(nr.name, str(exc))


def start_mpi_helper(pool: SSHPool, runtime: DockerRuntime, node, run_dir: str, log_dir: str, **kw) -> None:
    """The sshd helper container for mpirun on one node (node 0 included: mpirun may reach its own
    node through the address list too); waits until its port answers."""
    key_dir = f"{run_dir}/mpi_ssh"
    runtime.install_mpi_keys(pool, node.name, key_dir)
    port = runtime.ssh_port
    probe = f"(exec 3<>/dev/tcp/{node.peer_address}/{port}) 2>/dev/null"
    if pool.run(node.name, "bash -c " + shlex.quote(probe), timeout=30).rc == 0:
        raise LaunchError(f"node {node.name}: port {port} for the MPI containers' sshd is already in "
                          f"use (the node's own sshd?); set mpi_ssh_port in the inventory or pass --mpi-ssh-port")
    cmd = runtime.mpi_helper_command(node=node, log_dir=log_dir, key_dir=key_dir, **kw)
    res = pool.run(node.name, cmd, timeout=120)
    if res.rc != 0:
        raise LaunchError(f"node {node.name}: starting the MPI sshd container failed: {res.stderr.strip()[-300:]}")
    wait = f"for i in $(seq 100); do {probe} && exit 0; sleep 0.1; done; exit 1"
    if pool.run(node.name, "bash -c " + shlex.quote(wait), timeout=30).rc != 0:
        raise LaunchError(f"node {node.name}: the MPI container's sshd did not open port {port}")


def parallel(fns: list[Callable[[], None]]) -> None:
    """Run ``fns`` concurrently; re-raise the first error (a RemoteError keeps its node)."""
    if len(fns) == 1:
        fns[0]()
        return
    errors = []
    with ThreadPoolExecutor(max_workers=max(1, len(fns))) as ex:
        for f in [ex.submit(f) for f in fns]:
            try:
                f.result()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
    if errors:
        raise errors[0]


def cleanup(pool: SSHPool, runtime: HostRuntime, runs: list[NodeRun], run_id: str, trial: Trial,
            grace: float, notes: list[str]) -> None:
    """Kill every job's process group, then (per node, in parallel) read the rest of its log,
    remove the trial's containers and job directory, and check the node is idle. Errors on
    unreachable nodes are noted, never raised."""
    reachable: list[NodeRun] = []
    for nr in runs:
        if nr.unreachable:
            try:  # one quick try: the node may be back
                pool.run(nr.name, "true", timeout=3, retries=0)
                nr.unreachable = False
            except RemoteError:
                notes.append(f"cleanup skipped on unreachable node {nr.name}")
                continue
        reachable.append(nr)

    def phase(fn: Callable[[NodeRun], None]) -> None:
        def guarded(nr: NodeRun) -> None:
            try:
                fn(nr)
            except RemoteError as exc:
                notes.append(f"cleanup on node {nr.name} failed: {exc}")
        with ThreadPoolExecutor(max_workers=max(1, len(reachable))) as ex:
            list(ex.map(guarded, reachable))

    def kill(nr: NodeRun) -> None:
        if nr.job is not None and nr.exit_code is None:
            jobs.kill_job(pool, nr.job, grace_s=grace)

    def finish(nr: NodeRun) -> None:
        nr.read_rest(pool, notes)
        # the job dir goes once its log is read; its env file goes in any case (the job itself
        # deletes it when it starts; this covers a job that never ran)
        extra = ""
        if nr.job is not None:
            extra = (jobs.remove_command(nr.job.paths) if nr.log_complete
                     else shlex.join(["rm", "-f", "--", nr.job.paths.file("env")]))
        left = runtime.finish(pool, nr.name, run_id, trial.key, extra)
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.3)
            left = runtime.finish(pool, nr.name, run_id, trial.key)
        if left:
            notes.append(f"node {nr.name} not idle after cleanup: {', '.join(left[:5])}")

    phase(kill)
    phase(finish)


def collect(pool: SSHPool, runs: list[NodeRun], notes: list[str]) -> None:
    """Finish and close every node's log file (also for failed trials and unreachable nodes:
    whatever was streamed before the node went away stays)."""
    for nr in runs:
        if nr.log is None:
            continue
        nr.read_rest(pool, notes)
        nr.log.close()
