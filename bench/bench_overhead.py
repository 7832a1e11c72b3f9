"""Benchmark: orchestration overhead per trial on the simulated cluster (issue 3).

    .venv/bin/python bench/bench_overhead.py                      # 1n1g, 1n8g, 2n8g x 5 trials
    .venv/bin/python bench/bench_overhead.py --trials 3 --cluster /tmp/dlperf-testcluster/cluster.yaml

For each topology the same stand-in trial (PyTorch BERT log format, docker runtime, image from
the cluster's registry) is run two ways on the simulated cluster (scripts/testcluster up):

* direct: the exact ``docker run`` command lines of every node, started with ``subprocess`` on
  this machine (all nodes share its dockerd) and waited for - the stand-in's own run time,
  container start included;
* orchestrated: ``dlperf_tasks.remote.trial.run_trial`` - SSH, detached job under setsid, log
  streaming and watchdogs, process-group kill check, container cleanup on every node,
  idle check, SFTP log collection and the validity gate.

overhead = orchestrated wall - direct wall (median over trials). Goal: < 1 s median.
Registry login and image pull happen once before (as in a sweep) and are not counted.
Exit status: 0 unless something really failed (a missed goal is only printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import goal, machine, save_json, table  # noqa: E402

from dlperf_tasks import frameworks  # noqa: E402
from dlperf_tasks.catalog.loader import load_suite  # noqa: E402
from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window  # noqa: E402
from dlperf_tasks.remote.allocation import Leases  # noqa: E402
from dlperf_tasks.remote.inventory import Cluster  # noqa: E402
from dlperf_tasks.remote.runtime import make_runtime  # noqa: E402
from dlperf_tasks.remote.ssh import SSHPool  # noqa: E402
from dlperf_tasks.remote.trial import run_trial  # noqa: E402
from dlperf_tasks.core.topology import Topology  # noqa: E402

SPEEDS = {"1n1g": 100.0, "1n8g": 800.0, "2n8g": 1600.0, "4n8g": 3200.0}


def bench_suite(time_scale: float):
    s = load_suite("pytorch-bert")
    env = {"DLPERF_STANDIN_TIME_SCALE": str(time_scale),
           **{f"DLPERF_STANDIN_SPEED_{t.upper()}": str(v) for t, v in SPEEDS.items()}}
    return dataclasses.replace(s, env=env, env_multi_node={}, window=Window(5, 20), timeout_s=300, hang_timeout_s=120,
                               launcher={**s.launcher, "workdir": "/workspace/examples/bert"})


def direct_wall(cluster: Cluster, runtime, facts, trial: Trial, suite, nodes: list[str], tmp: Path) -> float:
    """Run the node commands the runner would run, locally, without any orchestration."""
    fw = frameworks.get(trial.cell.framework)
    specs = [cluster.node(n).node_spec() for n in nodes]
    settings = dict(suite.launcher)
    settings["env"] = dict(suite.env)
    cmds = []
    for r, n in enumerate(nodes):
        spec = fw.launch(trial, r, specs, settings)
        cmds.append(runtime.node_command(spec, trial=trial, run_id="bench-direct", node=cluster.node(n), node_rank=r,
                                         facts=facts[n], log_dir=str(tmp / f"direct-{n}"), attempt=1))
    t0 = time.perf_counter()
    for c in cmds:
        for d in c.mkdirs:
            os.makedirs(d, exist_ok=True)
    procs = []
    for c in cmds:  # what the job runner does: argv, env, and the container's env file on stdin
        p = subprocess.Popen(c.argv, cwd=c.cwd, env={**os.environ, **c.env}, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p.stdin.write(c.stdin)
        p.stdin.close()
        procs.append(p)
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    if any(codes):
        raise RuntimeError(f"direct run failed with exit codes {codes}")
    return wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", default=os.environ.get("DLPERF_TESTCLUSTER_YAML", "/tmp/dlperf-testcluster/cluster.yaml"),
                    help="cluster YAML of a running simulated cluster (scripts/testcluster up)")
    ap.add_argument("--trials", type=int, default=5, help="trials per topology (default 5)")
    ap.add_argument("--topologies", default="1n1g,1n8g,2n8g", help="comma-separated (default 1n1g,1n8g,2n8g)")
    ap.add_argument("--time-scale", type=float, default=0.05, help="stand-in sleep scale (default 0.05: ~1-2 s runs)")
    ap.add_argument("--poll", type=float, default=0.25, help="runner poll interval in seconds (default 0.25)")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = ap.parse_args(argv)

    cluster = Cluster.from_yaml(args.cluster)
    suite = bench_suite(args.time_scale)
    image = cluster.resolve_image(suite.container.image)
    runtime = make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher)
    rows, data = [], {"machine": machine(), "poll_s": args.poll, "topologies": {}}
    run_id = f"bench-overhead-{os.getpid()}"
    with SSHPool(cluster) as pool, tempfile.TemporaryDirectory(prefix="dlperf-bench-") as tmpd, \
            Leases(pool, cluster.names, run_id, wait_s=300):  # like a sweep: nodes to ourselves
        tmp = Path(tmpd)
        t0 = time.perf_counter()
        facts = runtime.prepare(pool, cluster.names)
        prep = time.perf_counter() - t0
        all_over = []
        for topo_name in args.topologies.split(","):
            topo = Topology.parse(topo_name)
            nodes = cluster.names[: topo.nodes]
            directs, orchs = [], []
            for i in range(1, args.trials + 1):
                trial = Trial(Cell(suite.id, suite.framework, suite.model, "fp32", 32, topo, window=suite.window), i)
                try:
                    directs.append(direct_wall(cluster, runtime, facts, trial, suite, nodes, tmp))
                except RuntimeError:  # killed from outside (e.g. another test session's leftover sweep): once more
                    directs.append(direct_wall(cluster, runtime, facts, trial, suite, nodes, tmp))
                for attempt in (1, 2):  # once more if killed from outside (another session's leftover sweep)
                    t1 = time.perf_counter()
                    res = run_trial(cluster, nodes, trial, suite, run_id, tmp / "out", pool=pool,
                                    runtime=runtime, facts=facts, poll_s=args.poll, attempt=attempt)
                    wall = time.perf_counter() - t1
                    if 137 not in res.exit_codes.values():
                        break
                orchs.append(wall)
                if res.status != TrialStatus.OK:
                    raise RuntimeError(f"{trial.id}: {res.status.value}: {res.reason}")
            over = [o - d for o, d in zip(orchs, directs)]
            all_over += over
            rows.append([topo_name, len(nodes), f"{statistics.median(directs):.2f}", f"{statistics.median(orchs):.2f}",
                         f"{statistics.median(over):.2f}", f"{max(over):.2f}"])
            data["topologies"][topo_name] = {"direct_s": directs, "orchestrated_s": orchs, "overhead_s": over}
    print(f"orchestration overhead per trial ({machine()}; poll {args.poll}s; prepare once: {prep:.1f} s)")
    print(table(["topology", "nodes", "direct s (median)", "orchestrated s", "overhead s (median)", "overhead max"],
                rows))
    med = statistics.median(all_over)
    data["overhead_median_s"] = med
    print(goal("median orchestration overhead per trial", med, 1.0, unit="s"))
    save_json(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
