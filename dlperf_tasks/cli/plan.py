"""``dlperf plan``: show the cells and trials a sweep of a suite would run (nothing is run)."""

from __future__ import annotations

import argparse
import json

DESCRIPTION = """\
Expand a suite into cells (batch size x precision x XLA x topology, or Megatron parallel cases)
and trials (1..N per cell), exactly as 'dlperf sweep' and the Airflow DAGs would, and print them.
Overrides narrow or change the suite's defaults; a topology not in the suite may be given
explicitly (any <nodes>n<gpus>g, e.g. 16n8g). Nothing is launched."""

EPILOG = """\
examples:
  dlperf plan mxnet-bert
  dlperf plan mxnet-bert --topologies 1n1g,1n8g --batch-sizes 32 --trials 3
  dlperf plan tensorflow-bert --precisions amp --xla both --batch-sizes 64,96
  dlperf plan megatron-gpt --cases DP_1x1x1_2_1536x16,MP_1x8x1_16_1536x16
  dlperf plan pytorch-bert --image-tag 20.12-py3 --format json > plan.json"""


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="list the cells and trials of a sweep (dry run)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("suite", help="suite id (see 'dlperf catalog') or path to a suite .yaml file")
    add_override_arguments(p)
    p.add_argument("--format", choices=["table", "json"], default="table",
                   help="table: cells and totals; json: the full plan with every trial and log path (default: table)")
    p.add_argument("--list-trials", action="store_true", help="table format: also list every trial and its log path(s)")
    p.set_defaults(func=_run)


def add_override_arguments(p: argparse.ArgumentParser, include_excluded: bool = True) -> None:
    """The options that narrow or change a suite's defaults (shared by ``plan`` and ``sweep``)."""
    p.add_argument("--catalog-dir", action="append", default=[], metavar="DIR",
                   help="extra directory of suite YAML files (searched first; may be repeated)")
    p.add_argument("--topologies", metavar="LIST", help="comma-separated topologies, e.g. 1n1g,1n8g,2n8g (also 16n8g)")
    p.add_argument("--batch-sizes", metavar="LIST", help="comma-separated batch sizes per device, e.g. 32,24")
    p.add_argument("--precisions", metavar="LIST", help="comma-separated precisions: fp32, amp (fp16 = amp)")
    p.add_argument("--xla", choices=["on", "off", "both"], help="XLA on, off or both (TensorFlow suites)")
    from dlperf_tasks.cli._args import short_int  # the range: plan.Overrides (shared with the scheduler)

    p.add_argument("--trials", type=short_int, metavar="N", help="trials per cell (seeds: 5-7; at most 100)")
    p.add_argument("--warmup-iters", type=short_int, metavar="N", help="iterations dropped at the start (seeds: 20)")
    p.add_argument("--measure-iters", type=short_int, metavar="M",
                   help="iterations measured after the warm-up (seeds: 100)")
    p.add_argument("--image-tag", metavar="TAG", help="run another tag of the suite's image, e.g. 20.12-py3")
    p.add_argument("--cases", metavar="LIST", help="Megatron: comma-separated case names (see 'dlperf catalog show megatron-gpt')")
    if include_excluded:
        p.add_argument("--include-excluded", action="store_true",
                       help="also plan combinations the suite excludes (e.g. batch sizes known to run out of memory)")


def overrides_from_args(args: argparse.Namespace):
    """The :class:`~dlperf_tasks.catalog.plan.Overrides` given by :func:`add_override_arguments`' options."""
    from dlperf_tasks.catalog.plan import Overrides

    return Overrides.from_dict({
        "topologies": args.topologies, "batch_sizes": args.batch_sizes, "precisions": args.precisions,
        "xla": args.xla, "trials": args.trials, "warmup_iters": args.warmup_iters,
        "measure_iters": args.measure_iters, "image_tag": args.image_tag, "cases": args.cases,
        "include_excluded": getattr(args, "include_excluded", False) or None,
    })


def launch_lines(meta: dict) -> list[str]:
    """What the suite runs beyond the cells: the model config shipped to the nodes, optimizer, max_iter."""
    out = []
    cfg = meta.get("bert_config")
    if cfg:
        out.append(f"model config: {cfg['file']} ({cfg.get('model') or 'custom'}: hidden {cfg['hidden_size']}, "
                   f"{cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads, intermediate "
                   f"{cfg['intermediate_size']}, vocab {cfg['vocab_size']}, max positions "
                   f"{cfg['max_position_embeddings']}) -> --config_file={cfg['path']} on every node")
    method = [f"{k} {meta[k]}" for k in ("optimizer", "max_iter") if k in meta]
    if "gradient_accumulation_steps" in meta:
        method.append("gradient accumulation per cell (grad_acc; samples/step = grad_acc x bz/dev x gpus)")
    if method:
        out.append("method: " + ", ".join(method))
    return out


def _run(args) -> int:
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.plan import plan

    suite = load_suite(args.suite, extra_dirs=args.catalog_dir)
    p = plan(suite, overrides_from_args(args))
    meta = suite.launch_metadata()
    if args.format == "json":
        print(json.dumps({**p.to_dict(), "launch": meta}, indent=2))
        return 0
    print(p.summary())
    for line in launch_lines(meta):
        print(line)
    from dlperf_tasks.engine.decisions import plan_line

    line = plan_line(suite, p)  # adaptive trial count: the worst case is the fixed count
    if line:
        print(line)
    if args.list_trials:
        print()
        for t in p.trials:
            print(f"{t.id}  key={t.trial.key}  " + "  ".join(t.log_paths))
    return 0
