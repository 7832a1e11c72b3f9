"""A started remote trial's plain-data parts that the finish needs besides the runner's state
(:func:`dlperf_tasks.remote.trial.start_trial`): the telemetry sampler (snapshots taken before
the trial, its detached sampling jobs) and the node leases. Plain data because a deferred trial
is finished by another process, maybe on another host; nothing here is a credential (SSH keys
are read from the inventory and its connections by whoever finishes)."""

from __future__ import annotations

import logging
from typing import Any, Mapping
from dlperf_tasks.telemetry.hooks import remote_sampler
from dlperf_tasks.telemetry.sampler import TelemetryConfig
from dlperf_tasks.remote.jobs import JobPaths, RemoteJob
from dlperf_tasks.telemetry.hooks import stop_and_save
from dlperf_tasks.remote.allocation import release_all
from dlperf_tasks.remote.jobpoll import JobsWatch, stop_jobs

log = logging.getLogger(__name__)


def telemetry_start(pool, nodes: list[str], trial, image: str | None) -> dict[str, Any] | None:
    """Start the trial's telemetry sampler (``DLPERF_TELEMETRY``); its state, or None (off / no sampler)."""
    cfg = TelemetryConfig.from_env()
    if not cfg.enabled:
        return None
    s = remote_sampler(pool, nodes, trial, cfg, image)
    s.start()
    return {"nodes": list(nodes), "image": image, "started_at": s.started_at, "errors": list(s.errors),
            "raw": {n: {"before": r.before, "container_ofed": r.container_ofed} for n, r in s.raw.items()},
            "jobs": {n: [[part, j.paths.job_id, j.paths.base_dir] for part, j in js] for n, js in s.jobs.items()}}


def telemetry_stop(pool, doc: Mapping[str, Any] | None, trial, run_dir) -> None:
    """Stop the sampler of :func:`telemetry_start` (any process) and keep its raw text in the run dir."""
    if not doc:
        return
    s = remote_sampler(pool, doc["nodes"], trial, TelemetryConfig.from_env(), doc.get("image"))
    s.started_at, s.errors = doc.get("started_at"), list(doc.get("errors") or [])
    for n, r in (doc.get("raw") or {}).items():
        s.raw[n].before, s.raw[n].container_ofed = r.get("before") or "", r.get("container_ofed")
    for n, js in (doc.get("jobs") or {}).items():
        s.jobs[n] = [(part, RemoteJob(n, JobPaths(job_id, base))) for part, job_id, base in js]
    stop_and_save(s, trial, run_dir)


def release_leases(pool, docs) -> None:
    """Release the trial's node leases (unreachable nodes: their lease expires by itself)."""
    for node, why in release_all(pool, docs).items():
        log.warning("lease of node %s not released (it expires by itself): %s", node, why)


def telemetry_abort(pool, doc: Mapping[str, Any] | None) -> None:
    """Kill the sampler's loops and remove their job directories (nothing kept)."""
    jobs = [{"node": n, "job_id": job_id, "base_dir": base} for n, js in ((doc or {}).get("jobs") or {}).items()
            for _, job_id, base in js]
    if jobs:
        stop_jobs(pool, JobsWatch(jobs=jobs, timeout_s=0, hang_s=0), grace_s=2.0)
