"""The ``local`` runtime: a trial's nodes are process groups on this machine.

Beside the ``docker`` and ``host`` runtimes (remote/runtime.py, over SSH), this one runs
each "node" of the topology as a process group (``setsid``) on this machine, started from
the framework's argv list without a shell; its output goes to the node's log file in the
run's log tree. A watchdog stops the whole trial on the wall-clock limit, when no node's
log grows for ``hang_timeout_s``, or when a node exits non-zero. The logs then go through
the same gate as every other runtime (:func:`dlperf_tasks.measure.extract.gate_run_logs`).
:func:`stop` kills every process group a trial started (a cancelled task calls it), and every
process that still carries the trial's mark (``DLPERF_TRIAL_MARK`` in its environment): a
launcher such as torchrun starts its ranks in sessions of their own, which a process-group kill
does not reach. An interrupt (Ctrl-C, SIGTERM) or an error while a trial runs stops it the same way.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks.frameworks.base import Framework, NodeSpec
from dlperf_tasks.core.model import Trial, TrialResult, TrialStatus
from dlperf_tasks.measure.extract import gate_run_logs
from dlperf_tasks.remote.dockercmd import TRIAL_MARK_ENV

LOCAL_MAX_PROCS = 8  # "GPUs" per node on the local cluster = worker processes on this machine
MARK_ENV = TRIAL_MARK_ENV  # inherited by every process a trial starts, whatever its session
_RUNNING: dict[str, list[subprocess.Popen]] = {}
_MARKS: dict[str, str] = {}
_LOCK = threading.Lock()


def local_nodes(count: int, gpus: int | None = None) -> list[NodeSpec]:
    """``count`` virtual nodes on this machine (names local0..; all reachable at 127.0.0.1)."""
    return [NodeSpec(name=f"local{i}", address="127.0.0.1", gpus=gpus or (os.cpu_count() or 1)) for i in range(count)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_model(nvidia_smi: str = "nvidia-smi") -> str | None:
    """The GPU model nvidia-smi names on this machine (``--query-gpu=name``), None without one;
    several different models: ``mixed: a, b`` (the MFU is refused for it)."""
    try:
        res = subprocess.run([nvidia_smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    names = sorted({line.strip() for line in res.stdout.splitlines() if line.strip()}) if res.returncode == 0 else []
    return (names[0] if len(names) == 1 else "mixed: " + ", ".join(names)) if names else None


def environment() -> dict[str, Any]:
    """Environment capture of this machine (no IPs, no user names)."""
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(terse=True),
                           "cpu_count": os.cpu_count(), "runtime": "local", "gpu_model": gpu_model() or "absent"}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = bool(torch.cuda.is_available())
    except ImportError:
        env["torch"] = None
    return env


def stop(trial_key: str, grace_s: float = 5.0, kill_wait_s: float = 30.0) -> int:
    """Terminate (then kill) every process group started for ``trial_key`` and every process
    carrying its mark; waits until every process it signalled has exited (bounded: ``grace_s``
    after SIGTERM, ``kill_wait_s`` after SIGKILL). Returns how many groups it started."""
    with _LOCK:
        procs = _RUNNING.pop(trial_key, [])
        mark = _MARKS.pop(trial_key, None)
    signalled: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        signalled.update(_signal_marked(mark, sig))
        deadline = time.monotonic() + wait_s
        while _left(alive, signalled, mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _left(procs, signalled, mark):
            break
    return len(procs)


def _left(procs: list[subprocess.Popen], pids: set[int], mark: str | None) -> bool:
    """Whether any of ``procs``, of ``pids`` or of the marked processes is still running."""
    return (any(p.poll() is None for p in procs) or any(_running(pid) for pid in pids)
            or bool(marked_pids(mark)))


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a process still exiting counts as running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def marked_pids(mark: str | None) -> list[int]:
    """Live processes of this user whose environment holds ``DLPERF_TRIAL_MARK=mark`` (zombies
    have no environment and are not counted)."""
    if not mark:
        return []
    needle = f"{MARK_ENV}={mark}".encode() + b"\0"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read() + b"\0":
                    found.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return found


def _signal_marked(mark: str | None, sig: int) -> list[int]:
    pids = marked_pids(mark)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def _settings(launcher: Mapping) -> dict:
    # this machine is the node: its interpreter (the venv) and a free port, whatever the suite says
    return {**dict(launcher or {}), "python": sys.executable, "master_port": free_port()}


def launch_specs(trial: Trial, framework: Framework, launcher: Mapping):
    topo = trial.cell.topology
    nodes = local_nodes(topo.nodes, topo.gpus_per_node)
    ranks = range(1) if framework.launch_mode == "mpi" else range(topo.nodes)
    settings = _settings(launcher)
    return nodes, [(r, framework.checked_launch(trial, r, nodes, settings)) for r in ranks]


def run_trial(trial: Trial, framework: Framework, launcher: Mapping, run_dir: str | Path, *,
              timeout_s: float = 3600, hang_timeout_s: float = 600,
              progress: Callable[[int], None] | None = None,
              stop_event: threading.Event | None = None,
              plausible_max_per_gpu: float | None = None) -> TrialResult:
    """Run ``trial`` as local processes, write its logs under ``run_dir``, gate it.
    ``progress(iteration)`` is called every few seconds with the iterations seen so far;
    ``plausible_max_per_gpu`` is the suite's plausibility bound (None: the framework's default)."""
    run_dir = Path(run_dir)
    started = time.time()
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    mark = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    with _LOCK:
        _MARKS[trial.key] = mark
    try:
        nodes, specs = launch_specs(trial, framework, launcher)
        for rank, spec in specs:
            log = run_dir / framework.log_relpath(trial, rank)
            log.parent.mkdir(parents=True, exist_ok=True)
            logs.append(log)
            with open(log, "wb") as fh:
                procs.append(subprocess.Popen(
                    spec.argv, env={**os.environ, **spec.env, MARK_ENV: mark}, cwd=spec.workdir or None,
                    stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
            with _LOCK:
                _RUNNING.setdefault(trial.key, []).append(procs[-1])
    except (OSError, ValueError) as exc:
        stop(trial.key)
        return TrialResult(trial=trial, status=TrialStatus.LAUNCH_FAILED, reason=f"launch failed: {exc}",
                           log_paths=[str(p.relative_to(run_dir)) for p in logs], started_at=started,
                           finished_at=time.time())
    metrics_log = run_dir / framework.log_relpath(trial, (framework.metrics_nodes(trial.cell) or [0])[0])
    try:
        status, reason = _watch(procs, logs, timeout_s, hang_timeout_s, stop_event,
                                lambda: progress and progress(_iterations(framework, metrics_log)))
    except BaseException:  # Ctrl-C, SIGTERM, an error: nothing the trial started outlives it
        stop(trial.key)
        raise
    # stopped or not, whatever is left of the trial (ranks a launcher left behind) goes
    stop(trial.key)
    codes = {nodes[r].name: p.returncode for (r, _), p in zip(specs, procs)}
    model = gpu_model() if framework.llm_name else None  # the MFU's GPU (this machine's)
    res = gate_run_logs(trial, run_dir, exit_codes=codes, runtime_status=status, runtime_reason=reason,
                        nodes=[n.name for n in nodes], started_at=started, finished_at=time.time(),
                        plausible_max_per_gpu=plausible_max_per_gpu, gpu_models={n.name: model for n in nodes})
    if framework.llm_name:
        res.node_env = {n.name: {"gpu_model": model, "image_digest": None} for n in nodes}
    return res


def _iterations(framework: Framework, log: Path) -> int:
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            seen = framework.parse(fh).facts.iterations_seen
    except OSError:
        return 0
    return max(seen) if seen else 0


def _watch(procs, logs, timeout_s, hang_timeout_s, stop_event, tick, tick_s: float = 3.0):
    start = time.monotonic()
    last_size, last_change, last_tick = -1, start, start
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if stop_event is not None and stop_event.is_set():
            return TrialStatus.NOT_RUN, "stopped"
        size = sum(p.stat().st_size for p in logs if p.exists())
        if size != last_size:
            last_size, last_change = size, now
        if now - last_tick >= tick_s:
            last_tick = now
            try:
                tick()
            except Exception:  # noqa: BLE001 - a display never breaks a trial
                pass
        if now - start > timeout_s:
            return TrialStatus.TIMEOUT, f"still running after {timeout_s:.0f} s"
        if now - last_change > hang_timeout_s:
            return TrialStatus.HANG, f"no log output for {hang_timeout_s:.0f} s"
        if any(p.poll() not in (None, 0) for p in procs):  # one node failed: stop the others soon
            time.sleep(2)
            if any(p.poll() is None for p in procs):
                return TrialStatus.NONZERO_EXIT, "a node exited non-zero; the others were stopped"
        time.sleep(0.2)
    return None, ""
