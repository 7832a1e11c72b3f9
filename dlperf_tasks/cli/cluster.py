"""``dlperf cluster check``: is every node reachable, is docker usable, how many GPUs."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Check a cluster inventory before a sweep: for every node, SSH reachability (host key checked
unless the inventory opts out), whether docker works and has the nvidia runtime, the GPUs
nvidia-smi sees (0 on a machine without GPUs), /dev/infiniband, and whether another sweep
holds the node's lease. Exit status 0 when every node is reachable, 1 otherwise.

A Slurm cluster file (`scheduler: slurm`, docs/slurm.md) is checked through its login node
instead: SSH, the partition and its GPUs (gres) in sinfo, nodes down or drained, account, QoS
and reservation (sacctmgr, when the cluster keeps accounting), the shared work directory, and one
tiny srun in the container mode (pyxis: --container-image of slurm.check_image or --image).
One line per finding (ok / FAIL, naming the field); exit status 1 when any line is FAIL.

examples:
  dlperf cluster check --cluster my-cluster.yaml
  dlperf cluster check --cluster examples/slurm-cluster.yaml --image nvcr.io/nvidia/pytorch:24.01-py3
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("cluster", help="check a cluster inventory (reachability, docker, GPUs)",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cluster_command", metavar="<action>")
    c = sub.add_parser("check", help="check every node of an inventory", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--cluster", required=True, metavar="YAML",
                   help="cluster inventory (format: docs/testcluster.md; Slurm: docs/slurm.md)")
    c.add_argument("--image", metavar="IMAGE", help="Slurm with pyxis: the image the check step runs in "
                                                   "(default: the file's slurm.check_image)")
    c.set_defaults(func=run_check)
    from dlperf_tasks.cli import cluster_health

    cluster_health.register(sub)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def check_node(pool, name: str) -> dict:
    from dlperf_tasks.core.errors import RemoteError
    from dlperf_tasks.remote.runtime import probe_command

    row = {"node": name, "ssh": "ok", "docker": "-", "nvidia": "-", "gpus": "-", "ib": "-", "lease": "-"}
    try:
        out = pool.run(name, probe_command(), timeout=30).stdout
    except RemoteError as exc:
        row["ssh"] = f"FAILED: {exc}"
        return row
    row["docker"] = "ok" if "docker=1" in out else "no"
    row["nvidia"] = "yes" if "nvidia=1" in out else "no"
    row["ib"] = "yes" if "ib=1" in out else "no"
    gpus = pool.run(name, "nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true", timeout=30).stdout.strip()
    row["gpus"] = gpus or "0"
    from dlperf_tasks.remote.allocation import holder

    row["lease"] = holder(pool, name) or "free"
    return row


def run_check(args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from dlperf_tasks.catalog.plan import format_table
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.ssh import SSHPool

    from dlperf_tasks.remote.slurm_inventory import scheduler_of

    if scheduler_of(args.cluster) == "slurm":
        return run_slurm_check(args)
    cluster = Cluster.from_yaml(args.cluster)
    with SSHPool(cluster) as pool, ThreadPoolExecutor(max_workers=len(cluster.names)) as ex:
        rows = list(ex.map(lambda n: check_node(pool, n), cluster.names))
    head = ["node", "ssh", "docker", "nvidia", "gpus", "ib", "lease"]
    print(format_table(head, [[r[h] for h in head] for r in rows]))
    return 0 if all(r["ssh"] == "ok" for r in rows) else 1


def run_slurm_check(args) -> int:
    from dlperf_tasks.remote.slurm_check import run_checks
    from dlperf_tasks.remote.slurm_inventory import SlurmCluster
    from dlperf_tasks.remote.ssh import SSHPool

    cluster = SlurmCluster.from_yaml(args.cluster)
    with SSHPool(cluster.login_cluster()) as pool:
        found = run_checks(cluster, pool, image=args.image)
    for f in found:
        print(f.line())      # the dlperf entry point escapes control characters
    problems = sum(not f.ok for f in found)
    print(f"{cluster.name}: {problems} problem(s)" if problems else f"{cluster.name}: ok")
    return 1 if problems else 0
