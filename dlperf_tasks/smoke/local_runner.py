"""Run one trial as local processes (the ``local`` cluster: this machine, host runtime).

Used when the settings' cluster is ``local`` (the embedded default of ``make run``). Each
"node" of the topology is one process group on this machine (``setsid``), started from the
framework's argv list without a shell; its output goes to the node's log file in the run's
log tree. A watchdog stops the whole trial on the wall-clock limit or when no node's log
grows for ``hang_timeout_s``; :func:`stop` kills every process group the trial started
(a cancelled Airflow task calls it from ``on_kill``).

The validity gate here is the minimal one (every node exited 0, the framework's own
checks pass); the remote layer applies the full gate for real clusters.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping

from dlperf_tasks.frameworks.base import Framework, NodeSpec
from dlperf_tasks.model import Trial, TrialResult, TrialStatus

_RUNNING: dict[str, list[subprocess.Popen]] = {}
_LOCK = threading.Lock()


def local_nodes(count: int, gpus: int | None = None) -> list[NodeSpec]:
    """``count`` virtual nodes on this machine (names local0..; all reachable at 127.0.0.1)."""
    return [NodeSpec(name=f"local{i}", address="127.0.0.1", gpus=gpus or (os.cpu_count() or 1)) for i in range(count)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(trial_key: str, grace_s: float = 5.0) -> int:
    """Terminate (then kill) every process group started for ``trial_key``; returns how many."""
    with _LOCK:
        procs = _RUNNING.pop(trial_key, [])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.1)
    return len(procs)


def run_trial(
    trial: Trial,
    framework: Framework,
    settings: Mapping,
    run_dir: str | Path,
    timeout_s: float = 3600,
    hang_timeout_s: float = 600,
) -> TrialResult:
    """Run ``trial`` on local processes, write its logs under ``run_dir`` and judge it."""
    run_dir = Path(run_dir)
    topo = trial.cell.topology
    nodes = local_nodes(topo.nodes, topo.gpus_per_node)
    # this machine is the node: its interpreter (the venv) and a free port, whatever the suite says
    settings = {**dict(settings), "python": sys.executable, "master_port": free_port()}
    ranks = range(1) if framework.launch_mode == "mpi" else range(topo.nodes)
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    started = time.time()
    try:
        for rank in ranks:
            spec = framework.launch(trial, rank, nodes, settings)
            log = run_dir / framework.log_relpath(trial, rank)
            log.parent.mkdir(parents=True, exist_ok=True)
            logs.append(log)
            with open(log, "wb") as fh:
                procs.append(subprocess.Popen(
                    spec.argv, env={**os.environ, **spec.env}, cwd=spec.workdir or None,
                    stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                ))
            with _LOCK:
                _RUNNING.setdefault(trial.key, []).append(procs[-1])
    except (OSError, ValueError) as exc:
        stop(trial.key)
        return _result(trial, TrialStatus.LAUNCH_FAILED, f"launch failed: {exc}", logs, run_dir, started)

    status, reason = _watch(procs, logs, timeout_s, hang_timeout_s)
    if status is not None:
        stop(trial.key)
    with _LOCK:
        _RUNNING.pop(trial.key, None)
    codes = {nodes[i].name: p.returncode for i, p in zip(ranks, procs)}
    return judge(trial, framework, run_dir, logs, status, reason, codes, [n.name for n in nodes], started)


def _watch(procs, logs, timeout_s, hang_timeout_s):
    start = time.monotonic()
    last_size, last_change = -1, start
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        size = sum(p.stat().st_size for p in logs if p.exists())
        if size != last_size:
            last_size, last_change = size, now
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


def _result(trial, status, reason, logs, run_dir, started) -> TrialResult:
    return TrialResult(trial=trial, status=status, reason=reason,
                       log_paths=[str(p.relative_to(run_dir)) for p in logs],
                       started_at=started, finished_at=time.time())


def judge(trial: Trial, framework: Framework, run_dir: Path, logs: list[Path], status: TrialStatus | None,
          reason: str, codes: dict, node_names: list[str], started: float) -> TrialResult:
    """Parse the metrics node's log and apply the shared validity gate (dlperf_tasks.validity)."""
    from dlperf_tasks import validity

    ranks = framework.metrics_nodes(trial.cell) or [0]
    path = run_dir / framework.log_relpath(trial, ranks[0])
    rel = [str(p.relative_to(run_dir)) for p in logs]
    if not path.exists():
        return validity.missing_log(trial, f"log {path.name} was not written", log_paths=rel, runtime_status=status)
    with open(path, encoding="utf-8", errors="replace") as fh:
        parsed = framework.parse(fh)
    return validity.gate(framework, trial, parsed, exit_codes=codes, runtime_status=status, runtime_reason=reason,
                         log_paths=rel, nodes=node_names, started_at=started, finished_at=time.time())
