"""Where a DAG trial may run: the nodes it may lease, in the order to try them."""

from __future__ import annotations

from dlperf_tasks.core.errors import RemoteError, StoreError
from dlperf_tasks.store.quarantine import Quarantine


def usable_nodes(cluster, trial, rd, settings) -> list[str]:
    """The nodes a DAG trial may lease, in the order to try them:

    * an A/B confirmation run pins its nodes (``nodes`` in the run's plan.json): A and B share
      the hardware, so only those, in that order;
    * otherwise every node with enough GPUs that the service has not quarantined
      (``state/quarantine.json`` in the run store, ``dlperf cluster clear NODE``), rotated by the trial's
      index so the trials of one cell spread over the nodes (node health compares them).

    Raises RemoteError naming the quarantined nodes when they leave too few for the trial."""
    topo = trial.cell.topology
    fits = [n.name for n in cluster.nodes if n.gpus >= topo.gpus_per_node]
    pinned = (rd.read("plan.json") or {}).get("nodes")
    if pinned:
        return [n for n in pinned if n in fits]
    try:
        out = Quarantine.for_settings(settings).nodes()
    except (ValueError, StoreError) as exc:
        raise RemoteError(f"trial {trial.id}: {exc}") from None
    ok = [n for n in fits if n not in out]
    if len(ok) < topo.nodes <= len(fits):
        names = ", ".join(sorted(n for n in fits if n in out))
        raise RemoteError(f"trial {trial.id} needs {topo.nodes} node(s) with {topo.gpus_per_node} GPUs; "
                          f"only {len(ok)} are not quarantined (quarantined: {names}; see dlperf cluster "
                          f"quarantine, clear with dlperf cluster clear NODE)")
    if not ok:
        return fits
    k = (trial.index - 1) % len(ok)
    return ok[k:] + ok[:k]
