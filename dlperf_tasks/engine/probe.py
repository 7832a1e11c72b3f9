"""The interconnect probe before a multi-node trial: nccl-tests ``all_reduce_perf`` on the trial's
nodes, through the trial's image and runtime, before the trial starts.

The probe is a trial of its own (framework ``nccl_probe``, ``frameworks/_nccl_probe.py``) run by the
remote runner like any other: the same leased nodes, the same image (its digest checked), the same
environment as the cell, MPI across the containers as the MXNet suites launch it (helper
containers' sshd), time limit, kill, log collection and cleanup. Its log is read with
``_nccl_tests_log.parse_text`` and judged by ``measure/interconnect.judge``. One probe per cell and
node set in a run dir (``probes/<key>.json``; a second trial of the cell on the same nodes reuses it).

A probe that cannot run, times out or prints no table never fails the trial: the result is
recorded with its reason (``error``) and a flag. Settings: ``measure/interconnect.probe_settings``
(the suite's ``interconnect_probe``, then the cluster file's); docs/interconnect-probe.md.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from dlperf_tasks.core.model import Trial, TrialStatus
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.frameworks import get as get_framework
from dlperf_tasks.frameworks._nccl_probe import probe_launcher
from dlperf_tasks.measure.interconnect import failed_probe, probe_record, probe_settings
from dlperf_tasks.remote.runtime import safe_name
from dlperf_tasks.remote.trial import TrialWatch, finish_trial, start_trial, wait_trial

log = logging.getLogger(__name__)

def probe_trial(trial: Trial) -> Trial:
    """The probe's own trial: the cell's topology and index under the ``nccl_probe`` framework."""
    cell = dataclasses.replace(trial.cell, suite=f"{trial.cell.suite}.probe", framework="nccl_probe")
    return Trial(cell, trial.index)


def probe_suite(suite, cfg: dict):
    """The suite as the probe runs it: its image, environment and ``mpirun`` settings, no source
    patches, the probe's launch settings and time limit."""
    t = int(cfg["timeout_s"])
    return dataclasses.replace(suite, framework="nccl_probe", upstream=None,
                               launcher=probe_launcher(suite.launcher, cfg), timeout_s=t, hang_timeout_s=t)


def settings_for(suite, cluster) -> dict | None:
    """The probe's settings for ``suite`` on ``cluster`` (None: off); raises ValueError naming the key."""
    where = f"interconnect_probe (suite {suite.id}, cluster {getattr(cluster, 'name', '?')})"
    return probe_settings((suite.extra or {}).get("interconnect_probe"), getattr(cluster, "interconnect_probe", None),
                          where=where)


def run_probe(cluster, nodes: list[str], trial: Trial, suite, rd: RunDir, *, pool, runtime, facts=None,
              stop_event=None) -> dict[str, Any] | None:
    """Probe ``nodes`` before ``trial`` (multi-node cells only); the probe's result dict (cached in the
    run dir), or None when the cell has one node or the probe is switched off. Never raises for a
    probe that failed: the result carries ``error``."""
    if trial.cell.topology.nodes < 2:
        return None
    try:
        cfg = settings_for(suite, cluster)
    except ValueError as exc:
        return failed_probe(nodes, str(exc))
    if cfg is None:
        return None
    rel = f"probes/{safe_name(trial.cell.id + '@' + ','.join(nodes), 150)}.json"
    cached = rd.read(rel)
    if isinstance(cached, dict):
        return cached
    try:
        result = _run(cluster, nodes, trial, suite, rd, cfg, pool=pool, runtime=runtime, facts=facts,
                      stop_event=stop_event)
    except Exception as exc:  # noqa: BLE001 - a probe never crashes the cell
        log.warning("interconnect probe on %s failed: %s", nodes, exc)
        result = failed_probe(nodes, f"{type(exc).__name__}: {exc}", cfg)
    rd.write(rel, result)
    return result


def _run(cluster, nodes, trial, suite, rd: RunDir, cfg: dict, *, pool, runtime, facts, stop_event) -> dict[str, Any]:
    pt, ps = probe_trial(trial), probe_suite(suite, cfg)
    out = rd.file("probes")
    out.mkdir(parents=True, exist_ok=True)
    w = TrialWatch(poll_s=0.25, stop_event=stop_event)
    state = start_trial(cluster, nodes, pt, ps, rd.run_id, pool=pool, runtime=runtime, facts=facts, watch=w)
    verdict = wait_trial(pool, state, w.poll_s, stop_event)
    res = finish_trial(cluster, state, verdict, ps, out, pool=pool, runtime=runtime, watch=w)
    path = out / get_framework("nccl_probe").log_relpath(pt, 0)
    if res.status not in (TrialStatus.OK, TrialStatus.INVALID_LOG):
        return failed_probe(nodes, f"{res.status.value}: {res.reason}", cfg)
    text = path.read_text(errors="replace") if path.is_file() else ""
    return probe_record(text, trial.cell.topology.world_size, cfg, nodes, log=str(path.relative_to(rd.path)))
