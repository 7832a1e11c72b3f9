"""``dlperf results``: browse, fetch, compare and trend archived benchmark runs.

Every sub-command reads the store named by ``--store URL`` (or ``$DLPERF_STORE_URL``, or the
``[dlperf]`` settings) through the store's index, so no command lists a whole bucket.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.cli._args import fraction, percent, positive_int
from dlperf_tasks.cli._term import escape
from dlperf_tasks.history.rows import compare_rows, ls_rows, show_rows, verdict_note

_EPILOG = """examples:
  dlperf results ls --suite mxnet-bert --since 2026-01-01
  dlperf results show RUN_ID
  dlperf results get RUN_ID --to ./run            (checksums verified)
  dlperf results compare RUN_A RUN_B
  dlperf results trend --suite mxnet-bert --cell 4n8g/bz32/fp32 --last 30 --png trend.png
  dlperf results check RUN_ID --record            (regression check against the cell histories)
  dlperf results export --suite mxnet-bert --parquet runs.parquet
  dlperf results export latest --format openmetrics --out dlperf.om   (also: conbench, bencher)

store: --store s3://bucket/prefix?endpoint=http://host:8333 (OSS too) | file:///dir | DIR
       (default: $DLPERF_STORE_URL; S3 keys from DLPERF_S3_ACCESS_KEY_ID/DLPERF_S3_SECRET_ACCESS_KEY)"""


def _date(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid date {text!r}: expected YYYY-MM-DD") from None



def _common(p: argparse.ArgumentParser, fmt: bool = True) -> None:
    p.add_argument("--store", metavar="URL", help="results store URL (default: $DLPERF_STORE_URL, else the default store where make run publishes)")
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
                       "each cell's median/average/speedup/trial counts and its regression findings. "
                       "RUN: a run id, a unique prefix of one, or 'latest' (newest run, of --suite if given).")
    q.add_argument("run_id", metavar="RUN")
    q.add_argument("--suite", help="with 'latest' or a prefix: only runs of this suite")
    _common(q)
    q.set_defaults(func=cmd_show)

    q = sub.add_parser("get", help="download a run (checksums verified)",
                       description="Download every object of a run into DIR, verifying each against the "
                                   "manifest's sha256; a corrupted object is refused. RUN: a run id, a unique "
                                   "prefix of one, or 'latest' (newest run, of --suite if given).")
    q.add_argument("run_id", metavar="RUN")
    q.add_argument("--suite", help="with 'latest' or a prefix: only runs of this suite")
    q.add_argument("--to", required=True, metavar="DIR", help="destination directory")
    _common(q, fmt=False)
    q.set_defaults(func=cmd_get)

    q = sub.add_parser("compare", help="compare two runs cell by cell",
                       description="Per cell: both medians, the change B vs A in % with its interval "
                                   "(1 - alpha; the cell's history in the store is the noise model), the "
                                   "smallest change the trial counts can detect, and a verdict: faster, "
                                   "slower, same (within +-TOL %) or undecided (the data cannot decide: "
                                   "run more trials); plus the environment diff. RUN may be a run id, a "
                                   "unique prefix of one, or 'latest'.")
    q.add_argument("run_a", metavar="RUN_A")
    q.add_argument("run_b", metavar="RUN_B")
    q.add_argument("--alpha", type=fraction, default=0.05, help="1 - confidence of the interval (default 0.05)")
    q.add_argument("--tolerance", type=percent, default=3.0, metavar="TOL",
                   help="changes within +-TOL %% count as 'same' (default 3)")
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
                                   "Exit status 1 if a regression is found. RUN: a run id, a unique prefix "
                                   "of one, or 'latest' (newest run, of --suite if given).")
    q.add_argument("run_id", metavar="RUN")
    q.add_argument("--suite", help="with 'latest' or a prefix: only runs of this suite")
    q.add_argument("--history", type=positive_int, default=20, metavar="N", help="baseline runs per cell (default 20)")
    q.add_argument("--min-effect", type=percent, default=3.0, metavar="PCT", help="minimum drop in %% (default 3)")
    q.add_argument("--alpha", type=fraction, default=0.01, help="Mann-Whitney significance level (default 0.01)")
    q.add_argument("--record", action="store_true", help="write the findings into the run's manifest")
    q.add_argument("--notify", metavar="TARGET", help="webhook URL or python:module:function "
                   "(default: $DLPERF_NOTIFY_URL when --record is given)")
    _common(q)
    q.set_defaults(func=cmd_check)

    q = sub.add_parser("export", help="export runs: Parquet, OpenMetrics, Conbench, Bencher",
                       description="--parquet FILE: a suite's history, one row per run x cell (pandas "
                                   "DataFrame). --format openmetrics|conbench|bencher: per cell throughput, "
                                   "speedup, efficiency and CV, labelled by suite, cell, run and image digest, "
                                   "for Prometheus/Grafana, Conbench or Bencher (docs/results.md). RUN: run ids, "
                                   "prefixes or 'latest'; without RUN, every run of --suite (since --since).")
    q.add_argument("runs", nargs="*", metavar="RUN")
    q.add_argument("--format", dest="export_format", choices=("parquet", "openmetrics", "conbench", "bencher"),
                   help="output format (default: parquet with --parquet)")
    q.add_argument("--suite", help="the suite (parquet: required; other formats: its runs when no RUN is named)")
    q.add_argument("--parquet", metavar="FILE", help="write the suite's history here as Parquet")
    q.add_argument("--out", metavar="FILE", help="write the export here (default: standard output)")
    q.add_argument("--since", type=_date, help="only runs on or after this date")
    q.add_argument("--no-timestamps", action="store_true",
                   help="openmetrics: no sample timestamps (Pushgateway, node_exporter textfile collector)")
    q.add_argument("--store", metavar="URL", help="results store URL (default: $DLPERF_STORE_URL, else the default store)")
    q.set_defaults(func=cmd_export)


# ------------------------------------------------------------------------------ helpers
def _store(args):
    """The store of ``--store`` or the settings; says which on stderr (one line)."""
    from dlperf_tasks.history.source import store_for, store_settings
    from dlperf_tasks.store.store import require_store

    s = store_settings(args.store)
    print(s.describe_store(), file=sys.stderr)
    return require_store(store_for(settings=s))


def _print(text: str) -> None:
    """One block of output, its control characters escaped (run ids, env values, notes and
    findings come from a store that may be hostile; JSON already escapes them)."""
    sys.stdout.write(escape(text.rstrip("\n")) + "\n")


def _render(rows, fmt, columns=None, doc=None) -> None:
    from dlperf_tasks.history.fmt import render

    _print(render(rows, fmt, columns, doc))


# ------------------------------------------------------------------------------ commands
def cmd_ls(args) -> int:
    store = _store(args)
    # only the last --limit matching summaries are held: the index is read in bounded pages
    runs = store.list_runs(suite=args.suite, since=args.since, limit=args.limit,
                           where=lambda r: bool(ls_rows([r], args.framework, args.model, args.status)))
    rows = ls_rows(runs)[: args.limit]
    _render(rows, args.format, ["run_id", "suite", "date", "status", "cells", "valid_trials", "findings"])
    return 0


def _manifest_findings(store, run_id):
    from dlperf_tasks.history.check import read_recorded

    try:
        return read_recorded(store, run_id)
    except DlperfError:
        return None


def cmd_show(args) -> int:
    from dlperf_tasks.history.source import resolve_run

    store = _store(args)
    args.run_id = resolve_run(store, args.run_id, suite=args.suite)
    from dlperf_tasks.store.readback import shown_result

    result = shown_result(args.run_id, store.read_result(args.run_id))
    run = result.get("run") or {}
    rows = show_rows(result)
    regress = _manifest_findings(store, args.run_id)
    from dlperf_tasks.engine.decisions import summary_lines
    from dlperf_tasks.history import confirm

    confirmed = store.read_annotation(args.run_id, confirm.ANNOTATION)  # A/B verdicts
    if args.format == "json":
        _render(rows, "json", doc={"run": run, "cells": rows, "regressions": regress, "confirmations": confirmed})
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
    _render([dict(r, flags=r["flags"] or "-") for r in rows], "table",
            ["cell_id", "median", "average", "speedup", "valid", "invalid", "cv", "unit", "flags"])
    if regress is not None:
        _print("")
        findings = regress.get("findings") or []
        from dlperf_tasks.history.basis import basis_line, basis_of

        _print(f"regressions: {basis_line(basis_of(regress))}")
        for f in findings:
            if f["kind"] == "loss":  # loss sanity: "fast but wrong?" with the band (history/loss.py)
                _print(f"  {f['kind']:10} {f['cell_id']}: {f.get('note')}")
                continue
            ci = f.get("ci_pct")
            _print(f"  {f['kind']:10} {f['cell_id']}: {f['baseline']:.4g} -> {f['current']:.4g} "
                   f"({f['delta_pct']:+.2f}%" + (f", 95% interval [{ci[0]:+.2f}, {ci[1]:+.2f}]%" if ci else "")
                   + (f", detectable >= {f['mde_pct']:.1f}%" if f.get("mde_pct") is not None else "")
                   + f", p={f['p_value']})" + confirm.status_suffix(confirmed, f"{f['kind']}:{f['cell_id']}"))
        bare = [v["cell_id"] for v in regress.get("loss") or [] if v.get("status") == "insufficient_history"]
        if bare:
            _print(f"  loss: no loss history yet, not checked: {', '.join(bare)}")
    for line in summary_lines(run):
        _print(line)
    return 0


def cmd_get(args) -> int:
    from dlperf_tasks.history.source import resolve_run

    store = _store(args)
    args.run_id = resolve_run(store, args.run_id, suite=args.suite)
    out = store.get_run(args.run_id, args.to)
    _print(f"run {args.run_id} downloaded to {out if out is not None else args.to} (checksums verified)")
    return 0


def cmd_compare(args) -> int:
    from dlperf_tasks.history.compare import compare_runs
    from dlperf_tasks.history.runs import RunView
    from dlperf_tasks.history.source import history_views, resolve_run

    store = _store(args)
    a = RunView.from_result(store.read_result(resolve_run(store, args.run_a)))
    b = RunView.from_result(store.read_result(resolve_run(store, args.run_b)))
    history = history_views(store, b.suite) if a.suite == b.suite else []
    doc = compare_runs(a, b, history, alpha=args.alpha, tolerance=args.tolerance / 100.0)
    rows = compare_rows(doc)
    _render(rows, args.format, doc=doc)
    if args.format == "table":
        _print("")
        _print(f"A = {a.run_id}, B = {b.run_id}; delta = (B - A) / A, interval at {1 - args.alpha:.0%}, "
               f"mde = smallest change these trial counts detect (80% power)")
        _print(verdict_note(doc))
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
        from dlperf_tasks.history.regress import RegressConfig
        from dlperf_tasks.report.plots import trend_png

        trend_png([p.to_dict() for p in tr.points], title=f"{tr.cell_id} ({len(tr.points)} runs)",
                  unit=tr.unit, path=args.png, baseline=tr.overall_median(),
                  min_history=RegressConfig().min_history)
        doc["png"] = str(Path(args.png))
    _render(rows, args.format, doc=doc)
    if args.format == "table":
        _print(f"cell {tr.cell_id}: {len(tr.points)} run(s), unit {tr.unit}"
               + (f"; plot written to {args.png}" if args.png else ""))
    return 0


def cmd_check(args) -> int:
    from dlperf_tasks.history.check import check_run
    from dlperf_tasks.history.regress import RegressConfig

    from dlperf_tasks.history.source import resolve_run

    store = _store(args)
    args.run_id = resolve_run(store, args.run_id, suite=args.suite)
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
    fmt = args.export_format or ("parquet" if args.parquet else None)
    if fmt is None:
        raise DlperfError("export: name --format openmetrics|conbench|bencher, or --parquet FILE")
    if fmt != "parquet":
        from dlperf_tasks.history.export_cli import export_runs

        return export_runs(args, fmt, _store(args), _print)
    if not args.suite or not (args.parquet or args.out):
        raise DlperfError("export --parquet FILE needs --suite (the suite whose history is exported)")
    from dlperf_tasks.history.frame import write_parquet
    from dlperf_tasks.history.source import history_views

    store = _store(args)
    path = args.parquet or args.out
    n = write_parquet(history_views(store, args.suite, since=args.since), path)
    _print(f"{n} rows (run x cell) written to {path}")
    return 0
