"""Engine steps 4-6: collect -> aggregate -> outputs, all read from the run directory.

:func:`aggregate` builds ``result.json`` from the run dir alone (plan.json for the run's
metadata, env.json for the nodes' environment and the image digest, the trial records), and
:func:`write_outputs` adds the rest: NCCL transports per multi-node trial (``run.env.nccl_transport``),
stragglers (``run.stragglers`` + stragglers.json), report.md, plots and the framework's index
files. Both entry points produce the same sections this way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks.engine.rundir import RunDir, now_iso
from dlperf_tasks.core.model import Trial, TrialResult
from dlperf_tasks.report.numbers import num2
from dlperf_tasks.measure.extract import dlperf_model_key
from dlperf_tasks.report import index_files
from dlperf_tasks.report.markdown import render_markdown
from dlperf_tasks.report.plots import render_plots
from dlperf_tasks.report.result_json import build_result, write_result
from dlperf_tasks.measure.stats import aggregate as cell_stats
from dlperf_tasks.frameworks._lines import read_log
from dlperf_tasks.remote import envcapture
from dlperf_tasks.measure import stragglers
from dlperf_tasks.report.flags import row_flags
from dlperf_tasks.telemetry import hooks
from dlperf_tasks.telemetry import report as telemetry_report
from dlperf_tasks.telemetry.report import loss_history_from_store


def collect(rd: RunDir, trials: list[Trial]) -> tuple[list[TrialResult], list[str]]:
    """The records of ``trials`` present in the run dir (a trial without one did not finish:
    left out), and the log files they name that are missing. The runners copy every node's
    log into the run dir when a trial ends, so collecting is a check, not a transfer."""
    found = []
    for t in trials:
        r = rd.load_trial(t)
        if r is not None:
            found.append(r)
    missing = [p for r in found for p in r.log_paths if not (rd.path / p).exists()]
    return found, missing


def run_meta(rd: RunDir, source: str) -> dict[str, Any]:
    plan = rd.read("plan.json") or {}
    env = rd.read("env.json") or {}
    return {
        "run_id": rd.run_id, "suite": plan.get("suite"), "framework": plan.get("framework"),
        "dag_run_id": plan.get("dag_run_id"), "started_at": plan.get("started_at"), "finished_at": now_iso(),
        "image": env.get("image", plan.get("image")), "image_digest": env.get("image_digest"),
        "planned_image_digest": plan.get("image_digest"),
        "upstream_commit": plan.get("upstream_commit") or None,
        "cluster": {"name": plan.get("cluster"), "nodes": env.get("nodes", [])},
        "env": dict(env.get("env") or {}), "window": plan.get("window"), "source": source,
        "policy": plan.get("policy"), "params": plan.get("params", {}),
    }


#: the run's decisions on its finished result (adaptive summary, node health, quarantine): they add
#: ``run.adaptive`` / ``run.node_health`` to the document before result.json is written
Decide = Callable[[dict[str, Any]], object]


def aggregate(rd: RunDir, results: list[TrialResult], suite, source: str,
              extra_meta: Mapping[str, Any] | None = None, settings=None, decide: Decide | None = None) -> dict[str, Any]:
    """Statistics per cell -> result.json (+ every other output); returns the result document.
    ``settings``: the step's settings; their store's index gives each cell's loss history (the
    "fast but wrong?" check, :mod:`dlperf_tasks.measure.steady`); None = not checked in this step.
    ``decide``: see :data:`Decide`."""
    return write_outputs(rd, results, {**run_meta(rd, source), **(extra_meta or {})}, suite, settings=settings,
                         decide=decide)


def write_outputs(rd: RunDir, results: list[TrialResult], meta: dict[str, Any], suite, settings=None,
                  decide: Decide | None = None) -> dict[str, Any]:
    """Every output of the run; result.json last and once (after ``decide`` added its sections),
    so a reader never sees a result without them."""
    transports = nccl_transports(rd.path, results)
    meta = {**meta, "env": {**(meta.get("env") or {}), "nccl_transport": transports}}
    reports, problem = _stragglers(rd.path, results)
    meta["stragglers"] = {"slow_nodes": sorted({n for r in reports for n in r.slow}),
                          "trials": [r.to_dict() for r in reports], **({"error": problem} if problem else {})}
    summaries = hooks.before_aggregate(rd.path, results, transports)
    if suite is not None and hasattr(suite, "launch_metadata"):
        meta["launch"] = suite.launch_metadata()  # model config shipped, optimizer, max_iter, accumulation
    result = build_result(cell_stats(results), meta, dlperf_model=dlperf_model_key(suite))
    history, why = loss_history_from_store(settings, meta.get("suite") or getattr(suite, "id", None),
                                           {**meta, "run_id": rd.run_id})
    hooks.after_result(result, rd.path, results, summaries, plots_dir=rd.file("plots"), loss_history=history)
    if why and settings is not None:
        result["run"]["loss_history_note"] = why
    rd.file("report.md").write_text(render_markdown(result) + _telemetry_section(result))
    _straggler_section(rd.path, reports, problem)
    write_plots(rd.path, result)
    write_index_files(rd.path, result)
    if decide is not None:
        decide(result)
    write_result(result, rd.file("result.json"))
    return result


def _telemetry_section(result: Mapping[str, Any]) -> str:
    section = telemetry_report.markdown_section(result)
    return "\n" + section if section else ""


def nccl_transports(out: Path, results: list[TrialResult]) -> dict[str, dict[str, Any]]:
    """The NCCL transport each multi-node trial actually used (IB or Socket, read from the
    ``NCCL_DEBUG=INFO`` lines of its logs), by trial id. Trials whose logs say nothing are left out."""
    found: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.trial.cell.topology.nodes < 2:
            continue
        for rel in r.log_paths:
            path = Path(out) / rel
            if not path.is_file():
                continue
            t = envcapture.nccl_transport(read_log(str(path)))
            if t["paths"] or t["network"] != envcapture.ABSENT:
                found[r.trial.id] = t
                break
    return found


def _stragglers(out: Path, results: list[TrialResult]):
    """Multi-node trials: the nodes' step times compared (see dlperf_tasks.measure.stragglers). A failure
    is reported in the outputs, never raised."""
    try:
        return stragglers.scan(results, out), None
    except Exception as exc:  # noqa: BLE001
        return [], f"straggler check failed: {type(exc).__name__}: {exc}"


def _straggler_section(out: Path, reports, problem: str | None) -> None:
    if problem:
        with open(out / "report.md", "a") as f:
            f.write(f"\n{stragglers.REPORT_HEADING}\n\n{problem}\n")
    elif reports:
        stragglers.write(out, reports)


def write_plots(out: Path, result: Mapping[str, Any]) -> list[str]:
    """The run's plots under ``<run dir>/plots`` (report.plots' entry point; matplotlib is
    imported when the first figure is drawn)."""
    return [str(p) for p in render_plots(result, out / "plots")]


def write_index_files(out: Path, result: Mapping[str, Any]) -> list[str]:
    """The framework's own index files (report.index_files)."""
    # seed 001's layout: logs/index/<model>_<sp|mp>_bs<B>_<fp>_<gpus>_speed, published with the logs
    return [str(p) for p in (index_files.write_index_files(dict(result), out / index_files.INDEX_DIR) or [])]


def cell_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"cell_id": c["cell_id"], "median_speed": c["median_speed"], "average_speed": c["average_speed"],
             "speedup": c["speedup"], "n_valid": c["n_valid"], "n_invalid": c["n_invalid"], "unit": c.get("unit"),
             "cv": c.get("cv"), "gpus": c.get("gpus"), "scaling_efficiency": c.get("scaling_efficiency"),
             "steady_state": c.get("steady_state")}
            for c in result.get("cells", [])]


def result_table(summaries: list[Mapping[str, Any]]) -> str:
    """A plain-text table of the cells (what ``make run`` prints)."""
    rows = [["cell", "median", "average", "speedup", "valid/invalid", "flags"]]
    for s in summaries:
        for c in s.get("cells", []):
            unit = f" {c['unit']}" if c.get("unit") and c.get("median_speed") is not None else ""
            rows.append([c["cell_id"], num2(c["median_speed"]) + unit, num2(c["average_speed"]), num2(c["speedup"]),
                         f"{c['n_valid']}/{c['n_invalid']}", "; ".join(row_flags(c)) or "-"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)
