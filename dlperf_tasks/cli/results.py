"""``dlperf results``: browse, fetch, compare and trend archived benchmark runs.

Every sub-command reads the store named by ``--store URL`` (or ``$DLPERF_STORE``, or the
``[dlperf]`` settings) through the store's index, so no command lists a whole bucket.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from dlperf_tasks.errors import DlperfError
from dlperf_tasks.cli._args import positive_int

_EPILOG = """examples:
  dlperf results ls --suite mxnet-bert --since 2026-01-01
  dlperf results show RUN_ID
  dlperf results get RUN_ID --to ./run            (checksums verified)
  dlperf results compare RUN_A RUN_B
  dlperf results trend --suite mxnet-bert --cell 4n8g/bz32/fp32 --last 30 --png trend.png
  dlperf results check RUN_ID --record            (regression check against the cell histories)
  dlperf results export --suite mxnet-bert --parquet runs.parquet

store: --store s3://bucket/prefix?endpoint=http://host:8333 | oss://... | file:///dir | DIR
       (default: $DLPERF_STORE; S3 keys from DLPERF_S3_ACCESS_KEY_ID/DLPERF_S3_SECRET_ACCESS_KEY)"""


def _date(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid date {text!r}: expected YYYY-MM-DD") from None



def _common(p: argparse.ArgumentParser, fmt: bool = True) -> None:
    p.add_argument("--store", metavar="URL", help="results store URL (default: $DLPERF_STORE or [dlperf] settings)")
    if fmt:
        p.add_argument("--format", choices=("table", "json", "csv"), default="table", help="output format (default: table)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "results", help="browse, fetch, compare and trend archived runs",
        description="Browse, fetch, compare and trend the runs archived in the results store "
                    "(S3, Aliyun OSS or a local directory), and check a run for regressions.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="results_command", metavar="<subcommand>")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    q = sub.add_parser("ls", help="list runs (newest first)", description="List archived runs, newest first.")
    q.add_argument("--suite", help="only this suite (e.g. mxnet-bert)")
    q.add_argument("--framework", help="only runs of this framework module (e.g. mxnet_bert)")
    q.add_argument("--model", help="only runs holding cells of this model (e.g. bert-base)")
    q.add_argument("--since", type=_date, help="only runs on or after this date (YYYY-MM-DD)")
    q.add_argument("--status", help="only runs with this status (e.g. ok, partial, failed)")
    q.add_argument("--limit", type=positive_int, default=50, help="at most this many rows (default 50)")
    _common(q)
    q.set_defaults(func=cmd_ls)

    q = sub.add_parser("show", help="one run's cells and findings", description="Show one run: metadata, "
                       "each cell's median/average/speedup/trial counts and its regression findings.")
    q.add_argument("run_id", metavar="RUN")
    _common(q)
    q.set_defaults(func=cmd_show)

    q = sub.add_parser("get", help="download a run (checksums verified)",
                       description="Download every object of a run into DIR, verifying each against the "
                                   "manifest's sha256; a corrupted object is refused.")
    q.add_argument("run_id", metavar="RUN")
    q.add_argument("--to", required=True, metavar="DIR", help="destination directory")
    _common(q, fmt=False)
    q.set_defaults(func=cmd_get)

    q = sub.add_parser("compare", help="compare two runs cell by cell",
                       description="Per cell: both medians, delta %% (B vs A) and whether the difference "
                                   "is beyond the cells' trial noise (Mann-Whitney U p < alpha and more than "
                                   "K standard errors); plus the environment diff.")
    q.add_argument("run_a", metavar="RUN_A")
    q.add_argument("run_b", metavar="RUN_B")
    q.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    _common(q)
    q.set_defaults(func=cmd_compare)

    q = sub.add_parser("trend", help="history of one cell (table and PNG)",
                       description="History of one cell over the suite's runs: median, min/max of the "
                                   "trials, speedup; optionally as a PNG plot.")
    q.add_argument("--suite", required=True)
    q.add_argument("--cell", required=True, metavar="SPEC",
                   help="the cell: full id or its parts in any order, e.g. 4n8g/bz32/fp32")
    q.add_argument("--last", type=positive_int, metavar="N", help="only the last N runs")
    q.add_argument("--png", metavar="FILE", help="also write the trend plot here")
    _common(q)
    q.set_defaults(func=cmd_trend)

    q = sub.add_parser("check", help="regression check of one run against history",
                       description="Test every cell of RUN against the same cell in the suite's last N "
                                   "valid earlier runs (throughput and scaling; see docs/results.md). "
                                   "Exit status 1 if a regression is found.")
    q.add_argument("run_id", metavar="RUN")
    q.add_argument("--history", type=positive_int, default=20, metavar="N", help="baseline runs per cell (default 20)")
    q.add_argument("--min-effect", type=float, default=3.0, metavar="PCT", help="minimum drop in %% (default 3)")
    q.add_argument("--alpha", type=float, default=0.01, help="Mann-Whitney significance level (default 0.01)")
    q.add_argument("--record", action="store_true", help="write the findings into the run's manifest")
    q.add_argument("--notify", metavar="TARGET", help="webhook URL or python:module:function "
                   "(default: $DLPERF_NOTIFY_URL when --record is given)")
    _common(q)
    q.set_defaults(func=cmd_check)

    q = sub.add_parser("export", help="export a suite's history as Parquet",
                       description="One row per run x cell (pandas DataFrame) written as Parquet.")
    q.add_argument("--suite", required=True)
    q.add_argument("--parquet", required=True, metavar="FILE")
    q.add_argument("--since", type=_date, help="only runs on or after this date")
    q.add_argument("--store", metavar="URL", help="results store URL (default: $DLPERF_STORE)")
    q.set_defaults(func=cmd_export)


# ------------------------------------------------------------------------------ helpers
def _store(args):
    from dlperf_tasks.history.source import open_store

    return open_store(args.store)


def _print(text: str) -> None:
    sys.stdout.write(text.rstrip("\n") + "\n")


def _render(rows, fmt, columns=None, doc=None) -> None:
    from dlperf_tasks.history.fmt import render

    _print(render(rows, fmt, columns, doc))


# ------------------------------------------------------------------------------ commands
def ls_rows(summaries, framework=None, model=None, status=None):
    rows = []
    for s in summaries:
        if framework and s.get("framework") != framework:
            continue
        cells = s.get("cells") or {}
        if model and not any((c or {}).get("model") == model for c in cells.values()):
            continue
        if status and str(s.get("status")) != status:
            continue
        n_valid = sum(int((c or {}).get("n_valid") or 0) for c in cells.values())
        rows.append({"run_id": s.get("run_id"), "suite": s.get("suite"), "date": s.get("date"),
                     "status": s.get("status"), "cells": len(cells), "valid_trials": n_valid,
                     "findings": (s.get("regressions") or {}).get("findings"), "framework": s.get("framework")})
    rows.sort(key=lambda r: (str(r["date"]), str(r["run_id"])), reverse=True)
    return rows


def cmd_ls(args) -> int:
    store = _store(args)
    rows = ls_rows(store.list_runs(suite=args.suite, since=args.since), args.framework, args.model, args.status)
    rows = rows[: args.limit]
    _render(rows, args.format, ["run_id", "suite", "date", "status", "cells", "valid_trials", "findings"])
    return 0


def show_rows(result) -> list[dict]:
    rows = []
    for c in result.get("cells", []):
        rows.append({"cell_id": c.get("cell_id"), "model": c.get("model"), "topology": c.get("topology"),
                     "bz": c.get("batch_size_per_device"), "precision": c.get("precision"),
                     "median": c.get("median_speed"), "average": c.get("average_speed"),
                     "speedup": c.get("speedup"), "valid": c.get("n_valid"), "invalid": c.get("n_invalid"),
                     "cv": c.get("cv"), "unit": c.get("unit")})
    return rows


def _manifest_findings(store, run_id):
    from dlperf_tasks.history.check import read_recorded

    try:
        return read_recorded(store, run_id)
    except DlperfError:
        return None


def cmd_show(args) -> int:
    store = _store(args)
    result = store.read_result(args.run_id)
    run = result.get("run") or {}
    rows = show_rows(result)
    regress = _manifest_findings(store, args.run_id)
    if args.format == "json":
        _render(rows, "json", doc={"run": run, "cells": rows, "regressions": regress})
        return 0
    if args.format == "csv":
        _render(rows, "csv")
        return 0
    for k in ("run_id", "suite", "framework", "dag_run_id", "started_at", "finished_at", "image",
              "image_digest", "upstream_commit"):
        _print(f"{k:16} {run.get(k) if run.get(k) is not None else '-'}")
    env = run.get("env") or {}
    if env:
        _print(f"{'env':16} " + ", ".join(f"{k}={v}" for k, v in sorted(env.items()) if not isinstance(v, dict)))
    _print("")
    _render(rows, "table", ["cell_id", "median", "average", "speedup", "valid", "invalid", "cv", "unit"])
    if regress is not None:
        _print("")
        findings = regress.get("findings") or []
        _print(f"regressions: {len(findings)} finding(s), {len(regress.get('noisy') or [])} noisy cell(s)")
        for f in findings:
            _print(f"  {f['kind']:10} {f['cell_id']}: {f['baseline']:.4g} -> {f['current']:.4g} "
                   f"({f['delta_pct']:+.2f}%, p={f['p_value']})")
    return 0


def cmd_get(args) -> int:
    store = _store(args)
    out = store.get_run(args.run_id, args.to)
    _print(f"run {args.run_id} downloaded to {out if out is not None else args.to} (checksums verified)")
    return 0


def compare_rows(doc) -> list[dict]:
    return [{"cell_id": c["cell_id"], "median_a": c["median_a"], "median_b": c["median_b"],
             "delta_pct": c["delta_pct"], "speedup_a": c["speedup_a"], "speedup_b": c["speedup_b"],
             "p_value": c["p_value"], "beyond_noise": c["beyond_noise"], "verdict": c["verdict"]}
            for c in doc["cells"]]


def cmd_compare(args) -> int:
    from dlperf_tasks.history.compare import compare_runs
    from dlperf_tasks.history.runs import RunView

    store = _store(args)
    a = RunView.from_result(store.read_result(args.run_a))
    b = RunView.from_result(store.read_result(args.run_b))
    doc = compare_runs(a, b, alpha=args.alpha)
    rows = compare_rows(doc)
    _render(rows, args.format, doc=doc)
    if args.format == "table":
        _print("")
        _print(f"A = {a.run_id}, B = {b.run_id}; delta = (B - A) / A")
        if doc["env_diff"]:
            _print("environment diff: " + "; ".join(f"{k}: {v['baseline']} -> {v['current']}"
                                                    for k, v in doc["env_diff"].items()))
        else:
            _print("environment diff: none")
    return 0


def cmd_trend(args) -> int:
    from dlperf_tasks.history.source import history_views
    from dlperf_tasks.history.trend import cell_trend

    store = _store(args)
    views = history_views(store, args.suite)
    if not views:
        raise DlperfError(f"suite {args.suite!r} has no runs in the store")
    tr = cell_trend(views, args.cell, last=args.last)
    rows = [{"date": p.date, "run_id": p.run_id, "status": p.status, "median": p.median, "min": p.min,
             "max": p.max, "n_valid": p.n_valid, "speedup": p.speedup} for p in tr.points]
    doc = tr.to_dict()
    if args.png:
        from dlperf_tasks.report.plots import trend_png

        trend_png([p.to_dict() for p in tr.points], title=f"{tr.cell_id} ({len(tr.points)} runs)",
                  unit=tr.unit, path=args.png, baseline=tr.overall_median())
        doc["png"] = str(Path(args.png))
    _render(rows, args.format, doc=doc)
    if args.format == "table":
        _print(f"cell {tr.cell_id}: {len(tr.points)} run(s), unit {tr.unit}"
               + (f"; plot written to {args.png}" if args.png else ""))
    return 0


def cmd_check(args) -> int:
    from dlperf_tasks.history.check import check_run
    from dlperf_tasks.history.regress import RegressConfig

    store = _store(args)
    cfg = RegressConfig(history_runs=args.history, min_effect=args.min_effect / 100.0, alpha=args.alpha)
    report = check_run(store, args.run_id, cfg, record=args.record,
                       notify_target=args.notify, notify_default=args.record, log=None)
    if args.format == "table":
        _print("\n".join(report.summary_lines()))
    else:
        rows = [dict(v.to_dict(), env_diff=json.dumps(v.env_diff)) for v in report.findings + report.noisy]
        _render(rows, args.format, ["kind", "status", "cell_id", "baseline", "current", "delta_pct", "p_value",
                                    "score", "env_diff"], doc=report.to_dict())
    return 1 if report.findings else 0


def cmd_export(args) -> int:
    from dlperf_tasks.history.frame import write_parquet
    from dlperf_tasks.history.source import history_views

    store = _store(args)
    n = write_parquet(history_views(store, args.suite, since=args.since), args.parquet)
    _print(f"{n} rows (run x cell) written to {args.parquet}")
    return 0
