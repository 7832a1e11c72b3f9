"""``dlperf extract``: compute DLPerf speeds, medians and speedups from an existing log tree."""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import sys

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import ExtractError
from dlperf_tasks.core.model import SPEED_RULES, Window
from dlperf_tasks.cli._args import non_negative_int, positive_int
from dlperf_tasks.cli._term import escape
from dlperf_tasks.history.export import run_csv
from dlperf_tasks.measure.extract import extract_tree
from dlperf_tasks.report.markdown import dlperf_text_lines, render_dlperf_text, render_markdown
from dlperf_tasks.report.result_json import extract_result
from dlperf_tasks.report.result_stream import SampleSpool, copy_file, write_document, write_result_file

DESCRIPTION = """\
Read a DLPerf-layout log tree, compute every trial's speed with the suite's framework rule,
check each trial (all iterations present, numbers finite and > 0, no crash in the log),
and print per-trial speeds, the seed-style table (median samples/s and speedup over the
1n1g median of the same model, precision and batch size) and the invalid trials with the
reason. Invalid trials are listed but never averaged in.

The tree looks like DLPerf's (any level works, 10n8g too):
  <log-dir>/<N>n<G>g/<prefix>_b<B>_<fp32|fp16>_<trial>.log       e.g. 1n8g/bert_b32_fp32_3.log
  <log-dir>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.node<k>.log    node k's log of the same trial
  <log-dir>/<case>/<N>n<G>g/<trial>/megatron_lm_perf_<N>n<G>g_dp.._mp.._pp.._mbs.._gbs..._pretrain_<k>.log
      (Megatron; seed 002's other names work too: megatron_pretrain_gpt_<N>n<G>d_..._rank<k>.log,
      ..._<CASE>_<k>.log, ..._pretrain_<h>_<l>_<a>_<k>.log; <case> names the case, <trial> the trial)
--log-dir may also be a .tar or .tar.gz of such a tree (read without unpacking). Only regular files are
read (no FIFO, device or symlink out of the tree). Two files for one trial (bert_b32_amp_1.log beside
bert_b32_fp16_1.log) are an error naming both. Windows count training steps, not log lines, and the
run's own arguments in the log (batch, gradient accumulation, world size) must agree with the cell."""

EPILOG = """\
examples:
  dlperf extract --suite mxnet-bert --log-dir logs/mxnet/bert/bz32 --batch-size-per-device 32
  dlperf extract --suite mxnet-bert --log-dir examples/logs/mxnet/bert/bz32 \\
      --batch-size-per-device 32 --warmup-iters 100 --measure-iters 100 --format markdown
  dlperf extract --suite tensorflow-bert --log-dir logs/tensorflow/bert/bz64 \\
      --batch-size-per-device 64 --format dlperf --output result.json

output formats (--format):
  full      per-trial speeds, the seed tables, dispersion (min/max/stdev/CV) and invalid trials (default)
  markdown  the report as Markdown: seed tables, per-trial speeds, invalid trials
  dlperf    exactly what DLPerf's extract_*_logs.py printed ({trial: speed} lines, then the
            result dict), for diffing against old DLPerf runs; invalid trials as '#' lines
  json      the result JSON (the same document --output writes)
  csv       one row per trial (cell, topology, batch, precision, trial, status, value, unit, reason),
            the same columns as the results page's CSV download

exit status: 0 when at least one cell has a median; 1 when logs were found but no trial
is valid; 2 on bad arguments or when the directory holds no usable log."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "extract", help="compute speeds/medians/speedups from an existing DLPerf log tree",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True,
                   help="catalog suite id (see 'dlperf catalog'), e.g. mxnet-bert; picks the log parser "
                        "and speed rule, or a path to a suite YAML")
    p.add_argument("--log-dir", required=True, metavar="DIR",
                   help="directory (or .tar/.tar.gz) holding <N>n<G>g/ sub-directories of logs")
    p.add_argument("--batch-size-per-device", type=positive_int, metavar="B",
                   help="use only logs named _b<B>_ (DLPerf's --batch_size_per_device); default: every batch size found")
    p.add_argument("--warmup-iters", type=non_negative_int, metavar="N",
                   help="training steps dropped at the start (default: the suite's, DLPerf used 20); counted "
                        "in steps, not log lines: a log printed every 50 steps covers 50 steps a line")
    p.add_argument("--measure-iters", type=positive_int, metavar="M",
                   help="training steps measured after the warm-up (default: the suite's, DLPerf used 100); "
                        "in steps, not log lines")
    p.add_argument("--speed-rule", choices=SPEED_RULES, default=None,
                   help="timestamps: DLPerf's rule (samples over the window's wall time from the step lines); "
                        "summary: the framework's own final figure (DLE's training_sequences_per_second, seed 001), "
                        "cross-checked against the step timestamps (default: the suite's)")
    p.add_argument("--prefix", help="use only logs whose name starts with <prefix>_b<B>_ (when a tree mixes models)")
    p.add_argument("--format", choices=["full", "markdown", "dlperf", "json", "csv"], default="full",
                   help="what to print on stdout (default: full; see below)")
    p.add_argument("--output", metavar="FILE", help="also write the result JSON to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    p.set_defaults(func=run)



def trial_lines(result) -> list[str]:
    """Readable per-trial speeds, one line per cell (DLPerf's ``{3: 1881.88, ...}`` made legible)."""
    out = []
    for st in result.cells:
        unit = st.unit
        parts = []
        for t in st.trials:
            v = None if t.metric is None else round(t.metric.value, 2)
            if t.valid:
                parts.append(f"#{t.trial.index} {v}")
            else:
                parts.append(f"#{t.trial.index} INVALID" + (f" ({v})" if v is not None else ""))
        out.append(f"{st.cell.id}: {', '.join(parts)} [{unit}; {st.n_valid} valid, {st.n_invalid} invalid]")
    return out


def _text(fmt: str, res, result) -> str:
    """The human-readable formats (escaped by the caller: logs may hold control sequences)."""
    if fmt == "csv":
        return run_csv(result)
    if fmt == "dlperf":  # (dlperf extract writes it line by line: _print)
        return render_dlperf_text(result)
    if fmt == "markdown":
        return render_markdown(result, full=False, trials=True)
    return "\n".join(trial_lines(res)) + "\n\n" + render_markdown(result, full=True, trials=False)


def run(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite)
    window = suite.window
    if args.warmup_iters is not None or args.measure_iters is not None:
        window = Window(warmup=window.warmup if args.warmup_iters is None else args.warmup_iters,
                        measure=window.measure if args.measure_iters is None else args.measure_iters, rule=window.rule)
    if args.speed_rule is not None:
        window = dataclasses.replace(window, rule=args.speed_rule)
    # build only what the output needs: per-sample rows only for the result JSON, and
    # then serialised into a spool file as each trial is gated (memory: the largest trial's)
    wants_doc = bool(args.output) or args.format == "json"
    spool = None
    if wants_doc:
        spool = SampleSpool(directory=_spool_dir(args.output))
    try:
        res = extract_tree(suite, args.log_dir, args.batch_size_per_device, window,
                           prefix=args.prefix, progress=None if args.quiet else sys.stderr,
                           keep_samples=False, sample_sink=spool.put if spool is not None else None)
        result = extract_result(res)
        _print(args, res, result, spool)
    finally:
        if spool is not None:
            spool.close()
    if res.skipped and not args.quiet:
        print(escape(f"dlperf extract: {len(res.skipped)} files not used, e.g. "
                     + "; ".join(f"{p} ({r})" for p, r in res.skipped[:3])), file=sys.stderr)
    if args.output and not args.quiet:
        print(f"dlperf extract: result written to {args.output}", file=sys.stderr)
    if not res.computable_cells:
        n = len(res.trials)
        print(f"dlperf: error: no valid trial in {args.log_dir}: {n} trial(s) found, all invalid "
              f"(reasons listed above)", file=sys.stderr)
        return 1
    return 0


def _spool_dir(output: str | None) -> str | None:
    """The spool sits beside the result file (same file system), else in the temp directory."""
    if not output:
        return None
    parent = os.path.dirname(os.path.abspath(output))
    return parent if os.path.isdir(parent) else None


def _print(args: argparse.Namespace, res, result, spool) -> None:
    if args.output:
        write_result_file(result, spool, args.output)
    if args.format == "json":
        sys.stdout.flush()
        binary = getattr(sys.stdout, "buffer", None)
        out = binary if binary is not None else io.BytesIO()  # a text-only stdout (tests): via bytes
        if args.output:
            copy_file(args.output, out)
        else:
            write_document(result, spool, out)
        if binary is None:
            sys.stdout.write(out.getvalue().decode("utf-8"))
        else:
            out.flush()
    elif args.format == "dlperf":
        write = sys.stdout.write
        for line in dlperf_text_lines(result):  # line by line: the text grows with the square of the trials
            write(escape(line) + "\n")
    else:
        sys.stdout.write(escape(_text(args.format, res, result)))


__all__ = ["register", "run", "ExtractError"]
