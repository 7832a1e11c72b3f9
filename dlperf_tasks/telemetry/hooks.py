"""The engine's two telemetry hooks (one engine: the CLI sweep and every DAG task pass through both).

Trial step (around the runner, same SSH pool, every node of the trial)::

    with telemetry.hooks.sampled_remote(pool, node_names, trial, run_dir):
        result = run_trial(...)
    # local runtime (this machine): telemetry.hooks.sampled_local(trial, run_dir)

Outputs step (before statistics, because policy may invalidate a trial; then after the result)::

    summaries = telemetry.hooks.before_aggregate(run_dir, results, nccl_transport)
    result = build_result(cell_stats(results), ...)
    telemetry.hooks.after_result(result, run_dir, results, summaries)   # attach, report section, plots

The configuration is :class:`~dlperf_tasks.telemetry.sampler.TelemetryConfig` from
``DLPERF_TELEMETRY`` (JSON) unless passed; ``{"enabled": false}`` turns sampling off.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from dlperf_tasks.telemetry.sampler import LocalSampler, RemoteSampler, TelemetryConfig, save_raw
from dlperf_tasks.telemetry import report

log = logging.getLogger(__name__)


def _indices(trial) -> list[int]:
    return list(range(trial.cell.topology.gpus_per_node))


@contextlib.contextmanager
def sampled_remote(pool, node_names: list[str], trial, run_dir: str | Path, cfg: TelemetryConfig | None = None,
                   image: str | None = None) -> Iterator[RemoteSampler | None]:
    """``image``: the trial's container image (its MOFED is compared with the host's)."""
    cfg = cfg or TelemetryConfig.from_env()
    if not cfg.enabled:
        yield None
        return
    s = remote_sampler(pool, node_names, trial, cfg, image)
    s.start()
    try:
        yield s
    finally:
        stop_and_save(s, trial, run_dir)


def remote_sampler(pool, node_names: list[str], trial, cfg: TelemetryConfig, image: str | None) -> RemoteSampler:
    """The trial's sampler on every node of the trial, over every GPU of its topology (not started)."""
    return RemoteSampler(pool, node_names, trial.key, cfg, gpu_indices={n: _indices(trial) for n in node_names},
                         image=image)


def stop_and_save(s: RemoteSampler, trial, run_dir: str | Path) -> None:
    """Stop a remote sampler and keep its raw text in the run dir; errors are logged (telemetry
    never fails a trial)."""
    try:
        save_raw(run_dir, trial.key, s.stop())
    except Exception as exc:  # noqa: BLE001 - telemetry never fails a trial
        s.errors.append(f"saving telemetry failed: {exc}")
    for e in s.errors:
        log.warning("trial %s: %s", trial.id, e)


@contextlib.contextmanager
def sampled_local(trial, run_dir: str | Path, cfg: TelemetryConfig | None = None) -> Iterator[LocalSampler | None]:
    cfg = cfg or TelemetryConfig.from_env()
    if not cfg.enabled:
        yield None
        return
    s = LocalSampler(trial.key, cfg, gpu_indices=_indices(trial))
    try:
        s.start()
    except Exception as exc:  # noqa: BLE001
        log.warning("trial %s: telemetry sampler did not start: %s", trial.id, exc)
        yield None
        return
    try:
        yield s
    finally:
        try:
            save_raw(run_dir, trial.key, s.stop())
        except Exception as exc:  # noqa: BLE001
            log.warning("trial %s: telemetry: %s", trial.id, exc)


def before_aggregate(run_dir: str | Path, results: Iterable, nccl_transport: Mapping[str, Any] | None = None,
                     cfg: TelemetryConfig | None = None) -> dict[str, dict]:
    """Summarise every trial that has telemetry in the run dir and apply the policy (a trial with
    an invalidating finding becomes INVALID_LOG with the reason). Returns summaries by trial key."""
    cfg = cfg or TelemetryConfig.from_env()
    out: dict[str, dict] = {}
    for r in results:
        try:
            net = ((nccl_transport or {}).get(r.trial.id) or {}).get("network")
            s = report.summarise_run_trial(run_dir, r, cfg.policy, nccl_net=net)
        except Exception as exc:  # noqa: BLE001 - a broken telemetry file never breaks the outputs
            log.warning("trial %s: telemetry summary failed: %s", r.trial.id, exc)
            continue
        if s is not None:
            out[r.trial.key] = s
            report.apply_policy(r, s)
    return out


def after_result(result: dict, run_dir: str | Path, results: Iterable, summaries: Mapping[str, dict],
                 report_md: str | Path | None = None, plots_dir: str | Path | None = None,
                 loss_history: Mapping[str, list[float]] | None = None) -> list[Path]:
    """Attach telemetry to ``result`` (call before writing result.json), append the report section
    to ``report_md`` when given, and draw one plot per trial with GPU samples into ``plots_dir``.
    ``loss_history``: cell id -> per-run final losses of earlier runs
    (:func:`dlperf_tasks.telemetry.report.loss_history_from_store`); None = not checked here."""
    results = list(results)
    report.attach(result, run_dir, results, summaries, loss_history=loss_history)
    if report_md is not None:
        section = report.markdown_section(result)
        if section:
            with open(report_md, "a") as f:
                f.write("\n" + section)
    made: list[Path] = []
    if plots_dir is not None:
        for key, s in summaries.items():
            if not any(n.get("gpus") for n in s.get("nodes", {}).values()):
                continue
            try:
                p = report.plot_trial(run_dir, key, s, Path(plots_dir) / f"telemetry_{key}.png")
            except Exception as exc:  # noqa: BLE001
                log.warning("telemetry plot of %s failed: %s", key, exc)
                continue
            if p is not None:
                made.append(p)
    return made
