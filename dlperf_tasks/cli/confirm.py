"""``dlperf confirm RUN_ID``: confirm a regression finding by an A/B run on the cluster."""

from __future__ import annotations

import argparse
import json
import sys

from dlperf_tasks.cli._args import fraction, int_at_least

DESCRIPTION = """\
Confirm (or not) a regression finding of a published run: re-run the flagged cell (and its
1n1g baseline cell when the finding is about scaling) with the previous good run's image (A)
and the flagged run's image (B), interleaved A B A B on the same nodes, then record the
verdict ('confirmed' with the A/B effect and its CI, or 'not_reproduced') and the A/B env diff
in the run's 'confirmations' annotation. With DLPERF_NOTIFY_ON=confirmed only confirmed
findings are sent to DLPERF_NOTIFY_URL.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("confirm", help="confirm a regression finding by an A/B re-run",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_id", metavar="RUN_ID", help="the flagged run")
    p.add_argument("--finding", metavar="KIND:CELL", help="which finding (default: the first)")
    p.add_argument("--store", metavar="URL", help="results store URL (default: the settings' store)")
    p.add_argument("--cluster", metavar="YAML", help="cluster inventory (needed unless --plan-only)")
    p.add_argument("--suite", metavar="ID|YAML", help="suite id or file (default: the run's suite)")
    p.add_argument("--rounds", type=int_at_least(1, 100), default=4, metavar="N", help="A B rounds (default 4)")
    p.add_argument("--nodes", metavar="LIST", help="run on these nodes (default: whatever the first step leases)")
    p.add_argument("--out", metavar="DIR", help="where the A/B run dirs go (default: a temp dir)")
    p.add_argument("--image-a", metavar="REF", help="image A (default: the previous good run's, by digest)")
    p.add_argument("--image-b", metavar="REF", help="image B (default: the flagged run's, by digest)")
    p.add_argument("--min-effect", type=fraction, default=0.02, metavar="F", help="smallest effect confirmed (0.02)")
    p.add_argument("--plan-only", action="store_true", help="print the plan (the DAG conf) and stop")
    p.add_argument("--no-record", action="store_true", help="do not write the verdict into the store")
    p.set_defaults(func=run)


def run(args) -> int:
    import tempfile

    from dlperf_tasks.engine.abconfirm import run_ab
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.errors import DlperfError
    from dlperf_tasks.history import confirm as C
    from dlperf_tasks.history.source import store_for
    from dlperf_tasks.remote.slurm_inventory import load_cluster

    store = store_for(args.store)
    regressions = store.read_annotation(args.run_id, "regressions")
    if not regressions or not regressions.get("findings"):
        raise DlperfError(f"run {args.run_id} has no regression finding (run 'dlperf results check' first)")
    try:
        plan = C.plan_confirmation(regressions, args.finding if args.finding else 0,
                                   store.list_runs(suite=regressions.get("suite")), rounds=args.rounds)
    except ValueError as exc:
        raise DlperfError(str(exc)) from None
    plan.image_a = args.image_a or plan.image_a
    plan.image_b = args.image_b or plan.image_b
    if args.plan_only:
        print(json.dumps(plan.to_conf(), indent=1, sort_keys=True))
        return 0
    if not args.cluster:
        raise DlperfError("--cluster YAML is needed to run the A/B confirmation")
    suite = load_suite(args.suite or plan.suite)
    print(f"confirming {plan.finding} of {plan.run_id}: A = {plan.image_a} (run {plan.run_a}), "
          f"B = {plan.image_b}; {plan.rounds} rounds on {args.nodes or 'the leased nodes'}", file=sys.stderr)
    out = args.out or tempfile.mkdtemp(prefix="dlperf-confirm-")
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else None
    values, env_a, env_b = run_ab(plan, suite, load_cluster(args.cluster), out, nodes=nodes,
                                  progress=lambda line: print(line, file=sys.stderr))
    doc = C.judge(plan, values, min_effect=args.min_effect, env_a=env_a or None, env_b=env_b or None)
    print(f"{plan.finding}: {doc['status'].upper()} - {doc['note']}")
    for k, d in doc["env_diff"].items():
        print(f"  env {k}: {d['baseline']} -> {d['current']}")
    if not args.no_record:
        sent = C.record(store, doc)
        print(f"recorded in {plan.run_id} annotations/{C.ANNOTATION}.json" + ("; notification sent" if sent else ""))
    return 0
