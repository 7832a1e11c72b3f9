"""The configured cluster as the engine reads it: its inventory (nodes and GPUs, no credentials), the
same with credentials added by the entry point, and whether a plan's topologies fit it."""

from __future__ import annotations

import dataclasses
import os

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.engine.errors import NonRetriable
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.remote.slurm_inventory import load_cluster as load_any
from dlperf_tasks.remote.local import LOCAL_MAX_PROCS


def load_inventory(settings):
    """The configured cluster's inventory file as it is (None for ``local``): nodes and GPUs,
    no credentials."""
    if settings.is_local:
        return None

    try:
        return load_any(settings.cluster)  # a Slurm cluster file: its login hosts and slurm section
    except (OSError, RemoteError) as exc:
        raise NonRetriable(f"cluster {settings.cluster}: {exc}") from None


def load_cluster(settings):
    """The inventory of the configured cluster (None for ``local``); ``settings.resolve_cluster``
    (when the entry point defines one) adds credentials from its own connection store."""
    cluster = load_inventory(settings)
    hook = getattr(settings, "resolve_cluster", None)
    if hook is None or cluster is None:
        return cluster
    if isinstance(cluster, SlurmCluster):  # the login hosts get their credentials as nodes do
        return dataclasses.replace(cluster, login=tuple(hook(cluster.login_cluster()).nodes))
    return hook(cluster)


def local_cores() -> int:
    """The cores this process may run on (its CPU affinity), the local runtime's ceiling of ranks."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_fits(topologies, settings, cluster=None, what: str = "invalid run parameter topologies") -> None:
    """Every topology must fit the configured cluster (checked before any node is touched; the
    inventory's counts only: no credential is looked up for it). The local runtime runs every rank
    as a process on this machine: no more ranks than it has cores. One check for the DAG's plan
    step, ``dlperf sweep`` and its ``--dry-run``; ``what`` starts the one-line refusal."""
    cores = 0
    if settings.is_local:
        cluster = None
        have_nodes, have_gpus, where = 1, LOCAL_MAX_PROCS, "the local cluster (this machine)"
        cores = local_cores()
    else:
        cluster = cluster or load_inventory(settings)
        if isinstance(cluster, SlurmCluster):  # Slurm places the jobs: the GPUs per node bound a topology
            check_fits_slurm(topologies, cluster, what)
            return
        have_nodes, have_gpus = len(cluster.nodes), max(n.gpus for n in cluster.nodes)
        where = f"cluster {getattr(cluster, 'name', settings.cluster)}"
    for topo in topologies:
        if topo.nodes > have_nodes:
            raise NonRetriable(f"{what}: {topo.name} needs {topo.nodes} nodes; {where} has {have_nodes}")
        if topo.gpus_per_node > have_gpus:
            raise NonRetriable(f"{what}: {topo.name} needs {topo.gpus_per_node} "
                               f"GPUs per node; {where} has at most {have_gpus}")
        if cluster is not None and topo.nodes > (fit := sum(n.gpus >= topo.gpus_per_node for n in cluster.nodes)):
            raise NonRetriable(f"{what}: {topo.name} needs {topo.nodes} nodes with {topo.gpus_per_node} GPUs; "
                               f"{where} has {fit} such node(s)")
        if cores and topo.nodes * topo.gpus_per_node > cores:
            raise NonRetriable(f"{what}: {topo.name} runs {topo.nodes * topo.gpus_per_node} processes; "
                               f"{where} has {cores} core(s) for them")


def check_fits_slurm(topologies, cluster: SlurmCluster, what: str) -> None:
    """On a Slurm cluster a topology asks for at most the cluster file's ``slurm.gpus_per_node``; the
    node count is Slurm's to grant (sbatch refuses more nodes than the partition has)."""
    have = cluster.slurm.gpus_per_node
    for topo in topologies:
        if have and topo.gpus_per_node > have:
            raise NonRetriable(f"{what}: {topo.name} needs {topo.gpus_per_node} GPUs per node; Slurm cluster "
                               f"{cluster.name} has slurm.gpus_per_node {have}")
