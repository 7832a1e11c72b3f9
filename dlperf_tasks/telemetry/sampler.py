"""Start and stop the telemetry sampler of one trial on every node (remote: the SSH pool and
detached jobs of :mod:`dlperf_tasks.remote.jobs`; local: process groups on this machine).

Per node: a snapshot before (GPU inventory, ECC counters, kernel-log XIDs, OFED/ibstat), two
detached loops (nvidia-smi, /proc), and at stop the loops' output and a snapshot after. Nothing
here fails a trial: a node where the sampler cannot start is noted in ``errors`` and has empty
telemetry. The raw text is kept in the run dir (``telemetry/<trial_key>/<node>.{gpu,host,before,after}.txt``)
so a report can be rebuilt; :func:`dlperf_tasks.telemetry.summarise_trial` turns it into the summary.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.core.settings import env_value
from dlperf_tasks.telemetry import commands
from dlperf_tasks.telemetry.summary import NodeRaw, Policy
from dlperf_tasks.telemetry.host import parse_ofed
from dlperf_tasks.remote import jobs

log = logging.getLogger(__name__)
PARTS = ("gpu", "host", "before", "after")


@dataclass
class TelemetryConfig:
    """``[dlperf] telemetry`` settings (JSON) or ``DLPERF_TELEMETRY`` (JSON): interval, the
    nvidia-smi to run, the kernel-log reader, the policy; ``enabled: false`` switches it off."""

    enabled: bool = True
    interval_s: float = 1.0
    nvidia_smi: str = "nvidia-smi"
    kernel_log_cmd: str = commands.KERNEL_LOG_CMD
    policy: Policy = field(default_factory=Policy)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "TelemetryConfig":
        d = dict(d or {})
        pol = Policy.from_dict(d.pop("policy", None))
        known = {k: v for k, v in d.items() if k in ("enabled", "interval_s", "nvidia_smi", "kernel_log_cmd")}
        cfg = cls(policy=pol, **known)
        commands._interval_ms(cfg.interval_s)  # validates
        return cfg

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "TelemetryConfig":
        """The ``telemetry`` setting of the environment (``$DLPERF_TELEMETRY``, checked by the settings)."""
        raw = env_value("telemetry", env)
        return cls.from_dict(json.loads(raw)) if raw else cls()


def _parallel(fn, items) -> list:
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=len(items)) as ex:
        return list(ex.map(fn, items))


class RemoteSampler:
    """The sampler of one trial on ``nodes`` through ``pool`` (an :class:`~dlperf_tasks.remote.ssh.SSHPool`)."""

    def __init__(self, pool, nodes: list[str], trial_key: str, cfg: TelemetryConfig | None = None,
                 gpu_indices: Mapping[str, list[int]] | None = None, image: str | None = None):
        self.pool, self.nodes, self.key, self.image = pool, list(nodes), trial_key, image
        self.cfg = cfg or TelemetryConfig()
        self.gpu_indices = dict(gpu_indices or {})
        self.raw: dict[str, NodeRaw] = {n: NodeRaw(gpu_indices=self.gpu_indices.get(n)) for n in self.nodes}
        self.jobs: dict[str, list] = {n: [] for n in self.nodes}
        self.errors: list[str] = []
        self.started_at: float | None = None
        self.stopped_at: float | None = None

    def start(self) -> None:
        self.started_at = time.time()

        def one(node: str) -> None:
            try:
                snap = commands.snapshot_command(self.cfg.nvidia_smi, self.cfg.kernel_log_cmd)
                self.raw[node].before = self.pool.run(node, "bash -c " + _q(snap), timeout=60).stdout
                self._container_ofed(node)
                for part, cmd in (("gpu", commands.gpu_loop_command(self.cfg.nvidia_smi, self.cfg.interval_s)),
                                  ("host", commands.host_loop_command(self.key, self.cfg.interval_s))):
                    self.jobs[node].append((part, start_detached(self.pool, node, cmd,
                                                                 f"telemetry_{part}_{self.key}_{node}")))
            except Exception as exc:  # noqa: BLE001 - telemetry never fails a trial
                self.errors.append(f"node {node}: telemetry sampler did not start: {exc}")

        _parallel(one, self.nodes)

    def _container_ofed(self, node: str) -> None:
        """The image's MOFED (``ofed_info -s`` in a throw-away container), only on hosts that have
        MOFED themselves (a host without it has no stack to mismatch; no container start then)."""
        if not self.image or host_ofed(self.raw[node].before) is None:
            return
        res = self.pool.run(node, commands.container_ofed_command(self.image), timeout=120)
        self.raw[node].container_ofed = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else None

    def stop(self) -> dict[str, NodeRaw]:
        self.stopped_at = time.time()

        def one(node: str) -> None:
            for part, job in self.jobs[node]:
                try:
                    jobs.kill_job(self.pool, job, grace_s=2.0)
                    data = bytearray()
                    while True:
                        chunk = jobs.read_log(self.pool, job, len(data))
                        if not chunk:
                            break
                        data += chunk
                    setattr(self.raw[node], part, data.decode(errors="replace"))
                    jobs.remove_job_dir(self.pool, job)
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"node {node}: telemetry {part} loop: {exc}")
            if self.jobs[node] or not self.raw[node].before:
                try:
                    snap = commands.snapshot_command(self.cfg.nvidia_smi, self.cfg.kernel_log_cmd)
                    self.raw[node].after = self.pool.run(node, "bash -c " + _q(snap), timeout=60).stdout
                except Exception as exc:  # noqa: BLE001
                    self.errors.append(f"node {node}: telemetry snapshot after the trial: {exc}")

        _parallel(one, self.nodes)
        return self.raw


class LocalSampler:
    """The same sampler on this machine (the ``local`` cluster and the GPU smoke run)."""

    def __init__(self, trial_key: str, cfg: TelemetryConfig | None = None, node: str = "local0",
                 gpu_indices: list[int] | None = None):
        self.key, self.cfg, self.node = trial_key, cfg or TelemetryConfig(), node
        self.raw = {node: NodeRaw(gpu_indices=gpu_indices)}
        self.procs: list[tuple[str, subprocess.Popen, Any]] = []
        self.errors: list[str] = []
        self.started_at: float | None = None
        self._dir = tempfile.mkdtemp(prefix="dlperf-telemetry-")

    def _snap(self) -> str:
        cmd = commands.snapshot_command(self.cfg.nvidia_smi, self.cfg.kernel_log_cmd)
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60).stdout

    def start(self) -> None:
        self.started_at = time.time()
        self.raw[self.node].before = self._snap()
        for part, cmd in (("gpu", commands.gpu_loop_command(self.cfg.nvidia_smi, self.cfg.interval_s)),
                          ("host", commands.host_loop_command(self.key, self.cfg.interval_s))):
            f = open(os.path.join(self._dir, part), "w+b")
            self.procs.append((part, subprocess.Popen(["bash", "-c", cmd], stdout=f, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL, start_new_session=True), f))

    def stop(self) -> dict[str, NodeRaw]:
        for part, p, f in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            f.seek(0)
            setattr(self.raw[self.node], part, f.read().decode(errors="replace"))
            f.close()
            os.unlink(f.name)
        os.rmdir(self._dir)
        self.raw[self.node].after = self._snap()
        return self.raw


def host_ofed(snapshot: str) -> str | None:
    return parse_ofed(commands.split_sections(snapshot).get("ofed", ""))


def start_detached(pool, node: str, script: str, prefix: str, env: Mapping[str, str] | None = None):
    """A detached job running ``bash -c script`` on ``node`` (the remote layer's job runner; works
    with its argv-based ``JobCommand`` API and with the older shell-string one)."""
    if hasattr(jobs, "JobCommand"):
        return jobs.start_job(pool, node, jobs.JobCommand(argv=["bash", "-c", script], env=dict(env or {})),
                              jobs.new_job_id(prefix))
    return jobs.start_job(pool, node, script, jobs.generate_job_id(prefix), environment=dict(env or {}) or None)


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


# ---- run-dir storage -------------------------------------------------------------------
def save_raw(run_dir: str | os.PathLike, trial_key: str, raw: Mapping[str, NodeRaw]) -> list[str]:
    """Write each node's raw text under ``telemetry/<trial_key>/``; returns the relative paths."""
    base = Path(run_dir) / "telemetry" / trial_key
    base.mkdir(parents=True, exist_ok=True)
    out = []
    for node, r in raw.items():
        for part in PARTS:
            rel = f"telemetry/{trial_key}/{node}.{part}.txt"
            (Path(run_dir) / rel).write_text(getattr(r, part) or "")
            out.append(rel)
        meta = {"gpu_indices": r.gpu_indices, "container_ofed": r.container_ofed}
        (base / f"{node}.meta.json").write_text(json.dumps(meta))
    return out


def load_raw(run_dir: str | os.PathLike, trial_key: str) -> dict[str, NodeRaw]:
    base = Path(run_dir) / "telemetry" / trial_key
    raw: dict[str, NodeRaw] = {}
    if not base.is_dir():
        return raw
    for meta in sorted(base.glob("*.meta.json")):
        node = meta.name[: -len(".meta.json")]
        m = json.loads(meta.read_text())
        r = NodeRaw(gpu_indices=m.get("gpu_indices"), container_ofed=m.get("container_ofed"))
        for part in PARTS:
            p = base / f"{node}.{part}.txt"
            setattr(r, part, p.read_text() if p.is_file() else "")
        raw[node] = r
    return raw
