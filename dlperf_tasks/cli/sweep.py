"""``dlperf sweep``: run a suite's benchmark sweep on a cluster over SSH/Docker."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from dlperf_tasks.cli._args import fraction, int_at_least, port, seconds
from dlperf_tasks.cli.plan import add_override_arguments, overrides_from_args

DESCRIPTION = """\
Run a benchmark sweep on a cluster: plan the suite's cells x trials (as 'dlperf plan'), lease
the cluster's nodes (other sweeps on the same cluster wait or use other nodes), prepare every
node once (registry login, image pull, environment capture; in parallel), run the trials
(several at once on disjoint nodes with --policy packed; one at a time, DLPerf-style, with
--policy sequential), then write result.json and report.md into --out.

Progress (cell, trial, node, iteration) is printed on stderr. Re-running into the same --out
runs only the trials that are missing or invalid there and aggregates everything again.
Registry passwords come from the environment variable named in the inventory's
registry.password_env (for NGC: username $oauthtoken, the API key as password).
"""

EPILOG = """\
examples:
  dlperf sweep --suite mxnet-bert --cluster cluster.yaml --topologies 1n1g,1n8g,2n8g,4n8g --trials 7 --out runs/bert
  dlperf sweep --suite pytorch-bert --cluster cluster.yaml --policy sequential --out runs/pt
exit status: 0 = every trial valid, 1 = some trials invalid or not run, 2 = error before/while running
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run a suite's sweep on a cluster (SSH + Docker) and write the results",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, help="suite id (see 'dlperf catalog') or path to a suite .yaml file")
    p.add_argument("--cluster", metavar="YAML|local",
                   help="cluster inventory (format: docs/testcluster.md), or 'local' (worker processes on this "
                        "machine); default: $DLPERF_CLUSTER, else local")
    p.add_argument("--out", metavar="DIR", help="output directory (logs/, trials/, result.json, report.md); required unless --dry-run")
    add_override_arguments(p, include_excluded=False)
    p.add_argument("--image", metavar="REF",
                   help="full image reference to run instead of the suite's (default: the suite's image, or the "
                        "inventory's mirror of it listed under 'images:')")
    p.add_argument("--mpi-ssh-port", type=port, metavar="PORT",
                   help="MPI suites: port of the containers' sshd (default: the inventory's mpi_ssh_port, else the "
                        "suite's container.sshd_port); must not be taken on the nodes")
    p.add_argument("--policy", choices=["packed", "sequential", "packed_exclusive_multinode"], default="packed",
                   help="packed (default): independent trials at once on disjoint free nodes, longest first; "
                        "sequential: one trial at a time like DLPerf; packed_exclusive_multinode: multi-node "
                        "trials run alone on the cluster")
    p.add_argument("--cooldown", type=seconds, default=0.0, metavar="S", help="idle seconds on a node after each trial")
    p.add_argument("--retries", type=int_at_least(0, 100), default=None, metavar="N",
                   help="extra attempts for retriable failures (node unreachable, launch failed, timeout, hang); "
                        "default: the settings' trial_retries ($DLPERF_TRIAL_RETRIES, else 1)")
    p.add_argument("--nodes", metavar="LIST", help="use only these inventory nodes (comma-separated names)")
    p.add_argument("--wait-for-nodes", type=seconds, default=0.0, metavar="S",
                   help="wait up to S seconds for nodes leased by another sweep (default: fail at once)")
    p.add_argument("--no-env-capture", action="store_true", help="skip nvidia-smi / CUDA / NCCL version capture")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--adaptive", nargs="?", const=0.01, type=fraction, metavar="REL_WIDTH",
                   help="stop a cell's trials (after 3) once its median's CI is within REL_WIDTH (default 0.01); "
                        "the suite's trials are the maximum (docs/decisions.md)")
    p.add_argument("--quarantine", action="store_true",
                   help="take a node that is slower than its peers or fails out of this sweep, and keep it out of "
                        "later sweeps until 'dlperf cluster clear NODE' (state in the settings' work dir)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan and the command each trial would run on each node; run and write nothing")
    p.set_defaults(func=run)


def run(args) -> int:
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.core.errors import PlanError
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.engine.sweep import SweepOptions, run_sweep

    if args.trials is not None and args.trials < 1:
        raise PlanError("--trials must be >= 1")
    from dlperf_tasks.core.settings import Settings

    settings = Settings.load(cluster=args.cluster)
    suite = load_suite(args.suite, extra_dirs=args.catalog_dir or list(settings.catalog_path) or None)
    the_plan = plan(suite, overrides_from_args(args))
    if args.adaptive:
        from dlperf_tasks.policy.adaptive import AdaptivePolicy, worst_case

        cells: dict[str, int] = {}
        for pt in the_plan.trials:
            cells[pt.trial.cell.id] = cells.get(pt.trial.cell.id, 0) + 1
        wc = worst_case(cells, AdaptivePolicy(rel_width=args.adaptive))
        print(f"adaptive trials: {wc['min_trials']} to {wc['max_trials']} trials (worst case = the fixed count)",
              file=sys.stderr)
    from dlperf_tasks.remote.slurm_inventory import scheduler_of

    slurm = not settings.is_local and bool(settings.cluster) and scheduler_of(settings.cluster) == "slurm"
    if not slurm:  # a Slurm cluster's fit is checked by its own dry run / submission
        fit_check(the_plan, settings)  # refused in one line before anything starts (as the DAG's plan step)
    if args.dry_run:
        return dry_run(suite, the_plan, settings, image=args.image, ssh_port=args.mpi_ssh_port)
    if not args.out:
        raise PlanError("--out is required (or --dry-run)")
    from dlperf_tasks.remote.slurm_inventory import SlurmCluster

    cluster = None if settings.is_local else (SlurmCluster.from_yaml(settings.cluster) if slurm
                                              else Cluster.from_yaml(settings.cluster))
    opts = SweepOptions(policy=args.policy, cooldown_s=args.cooldown, retries=max(0, settings.trial_retries if args.retries is None else args.retries),
                        nodes=[n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else None,
                        lease_wait_s=args.wait_for_nodes, image=args.image,
                        mpi_ssh_port=args.mpi_ssh_port, capture_env=not args.no_env_capture,
                        progress=None if args.quiet else sys.stderr,
                        adaptive={"rel_width": args.adaptive} if args.adaptive else None,
                        node_health=True if args.quarantine else None,
                        work_dir=settings.work_dir if args.quarantine else None, settings=settings)
    stop = threading.Event()

    def on_term(signum, frame):  # SIGTERM or SIGINT: stop, trials clean up their nodes
        stop.set()
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGINT too: a shell without job control starts a background job with SIGINT ignored, and Python
    # keeps an inherited SIG_IGN, so `dlperf sweep &` in a script would never stop on kill -INT
    old = signal.signal(signal.SIGTERM, on_term)
    old_int = signal.signal(signal.SIGINT, on_term)
    try:
        res = run_sweep(suite, the_plan, cluster, args.out, opts, stop_event=stop)
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)
    total = len(res.all)
    bad = [r for r in res.all if not r.valid]
    print(f"{total - len(bad)}/{total} trials valid; wrote {res.out_dir / 'result.json'} and "
          f"{res.out_dir / 'report.md'}")
    return 1 if bad else 0


def fit_check(the_plan, settings) -> None:
    """The DAG's check (:func:`dlperf_tasks.engine.clusterconf.check_fits`): every planned topology fits
    the cluster's nodes and GPUs per node, and locally this machine's cores; a PlanError if not."""
    from dlperf_tasks.core.errors import PlanError
    from dlperf_tasks.engine.errors import NonRetriable
    from dlperf_tasks.engine.clusterconf import check_fits

    try:
        check_fits(sorted({c.topology for c in the_plan.cells}), settings, what="topologies")
    except NonRetriable as exc:
        raise PlanError(str(exc)) from None


def dry_run(suite, the_plan, settings, image: str | None = None, ssh_port: int | None = None) -> int:
    """Print the plan and every trial's commands (nothing runs, nothing is written). With a cluster
    inventory: the inventory is read and checked as the DAG's plan step does (a missing file or a topology
    it cannot fit is refused), and each node's command is the one a real trial builds
    (``remote.trial.trial_commands``: container runtime line, master address, NCCL interface) on the
    inventory's first nodes that fit; environment values that look secret are masked."""
    if settings.is_local:
        print(the_plan.summary())
        from dlperf_tasks.frameworks import get
        from dlperf_tasks.remote.local import launch_specs

        fw = get(suite.framework)
        for pt in the_plan.trials:
            _, specs = launch_specs(pt.trial, fw, suite.launcher)
            for rank, spec in specs:
                print(f"{pt.id} node {rank} (local runtime, this machine): {spec.shell()}")
        return 0
    from dlperf_tasks.cli._dryrun import cluster_commands
    from dlperf_tasks.cli._dryrun_slurm import slurm_commands
    from dlperf_tasks.remote.slurm_inventory import scheduler_of

    if settings.cluster and scheduler_of(settings.cluster) == "slurm":
        lines = list(slurm_commands(suite, the_plan, settings, image=image))  # refuses first
    else:
        lines = list(cluster_commands(suite, the_plan, settings, image=image, ssh_port=ssh_port))
    print(the_plan.summary())
    print("\n".join(lines))
    return 0
