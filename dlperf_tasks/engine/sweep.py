"""A whole sweep in this process (``dlperf sweep``), driving the engine's steps:

plan (given) -> lease nodes -> prepare them once (login, pull, env capture, in parallel) ->
run the trials (packing scheduler, retries, watchdog) -> collect -> aggregate -> outputs ->
node cleanup. Publishing is ``dlperf publish`` (or ``--publish``).

The output directory is an engine run directory (:mod:`dlperf_tasks.engine.rundir`).
Re-running into the same ``--out`` keeps its run id and runs only the trials without a valid
record, then aggregates everything again. ``cluster`` ``None`` = the local runtime (this
machine).
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from dlperf_tasks.engine.outputs import aggregate, nccl_transports  # noqa: F401 (re-exported)
from dlperf_tasks.engine.progress import Display
from dlperf_tasks.engine.rundir import RunDir, now_iso, write_plan
from dlperf_tasks.engine.schedule import Batch, run_locally, run_scheduled
from dlperf_tasks.engine.setup import prepare_local, prepare_nodes
from dlperf_tasks.core.errors import DlperfError, RemoteError
from dlperf_tasks.core.model import TrialResult
from dlperf_tasks.remote import nodeclean
from dlperf_tasks.remote.allocation import Leases
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.engine.slurmsweep import run_on_slurm
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.engine.decisions import for_sweep
from dlperf_tasks.remote.runtime import make_runtime


@dataclass
class SweepOptions:
    policy: str = "packed"
    cooldown_s: float = 0.0
    retries: int = 1  # extra attempts for retriable failures (NODE_UNREACHABLE, LAUNCH_FAILED, TIMEOUT, HANG)
    nodes: list[str] | None = None  # restrict to these inventory nodes
    lease_ttl_s: int = 120
    lease_wait_s: float = 0.0  # wait this long for nodes leased by another sweep
    poll_s: float = 0.25
    unreachable_grace_s: float = 8.0
    capture_env: bool = True
    run_id: str | None = None
    mpi_ssh_port: int | None = None  # MPI helper containers' sshd port (default: inventory, then the suite's)
    image: str | None = None  # full image reference overriding the plan's (and the cluster's mirror)
    dag_run_id: str | None = None
    adaptive: Any = None  # adaptive trial count: None = the suite's, False = off, True/dict = on (decisions.py)
    node_health: Any = None  # node health: None = the suite's, True = quarantine on, dict = HealthConfig
    work_dir: str | None = None  # set: quarantine persists (the settings' store, else <work_dir>/quarantine.json);
    # None: quarantine lasts this sweep
    progress: TextIO | None = field(default_factory=lambda: sys.stderr)
    settings: Any = None  # dlperf settings: their store's index gives each cell's loss history


@dataclass
class SweepResult:
    result: dict[str, Any]
    out_dir: Path
    ran: list[TrialResult]
    reused: list[TrialResult]
    skipped: list[TrialResult]

    @property
    def all(self) -> list[TrialResult]:
        return self.reused + self.ran + self.skipped


def _quarantine(opts: SweepOptions):
    """Where a persistent quarantine lives: the settings' run store (``state/quarantine.json``,
    what the service and ``dlperf cluster clear`` use), else ``opts.work_dir`` (no settings)."""
    if not opts.work_dir:
        return None
    if opts.settings is None:
        return opts.work_dir

    return Quarantine.for_settings(opts.settings)


def start_run(suite, plan, out_dir, opts: SweepOptions, cluster_name: str) -> RunDir:
    """The run dir with its plan.json (run id kept on a re-run into the same directory)."""
    rd = RunDir.at(out_dir, opts.run_id, suite=suite.id)
    prev = rd.read("plan.json") or {}
    started = str(prev["started_at"]) if prev.get("run_id") == rd.run_id and prev.get("started_at") else now_iso()
    write_plan(rd, plan.to_dict(), params={**plan.overrides.to_dict(), "policy": opts.policy}, dag=suite.dag,
               dag_run_id=opts.dag_run_id, started_at=started, policy=opts.policy, cluster=cluster_name)
    return rd


def run_sweep(suite, plan, cluster: Cluster | SlurmCluster | None, out_dir: str | os.PathLike, options: SweepOptions | None = None,
              stop_event: threading.Event | None = None) -> SweepResult:
    """Run ``plan`` (from :func:`dlperf_tasks.catalog.plan.plan`) of ``suite`` on ``cluster``; write ``out_dir``."""
    opts = options or SweepOptions()
    if opts.image and suite.container is None:
        raise DlperfError(f"suite {suite.id} runs on the host (no container); --image does not apply")
    rd = start_run(suite, plan, out_dir, opts, cluster.name if cluster else "local")
    existing = rd.load_trials()
    planned = [pt.trial for pt in plan.trials]
    reused = [existing[t.id] for t in planned if t.id in existing and existing[t.id].valid]
    todo = [t for t in planned if not (t.id in existing and existing[t.id].valid)]
    display = Display(opts.progress, len(todo))
    if reused:
        display.emit(f"{len(reused)} trial(s) already valid in {rd.path}; running the {len(todo)} missing or invalid")

    dec = for_sweep(suite, todo, reused, adaptive=opts.adaptive, node_health=opts.node_health, work_dir=_quarantine(opts),
                    run_id=rd.run_id, nodes=(opts.nodes or cluster.names) if isinstance(cluster, Cluster) else (),
                    run_dir=rd.path)
    batch = Batch(suite, rd, display, opts.policy, opts.cooldown_s, opts.retries, opts.poll_s,
                  opts.unreachable_grace_s, stop_event or threading.Event(), decisions=dec)
    ran: list[TrialResult] = []
    skipped: list[TrialResult] = []
    if cluster is None:
        prepare_local(rd)
        ran = run_locally(todo, batch)
    elif isinstance(cluster, SlurmCluster):
        ran = run_on_slurm(todo, batch, cluster, opts.image or cluster.resolve_image(plan.image),
                           nodes=opts.nodes) if todo else []
    elif todo:
        ran, skipped = _on_cluster(suite, plan, cluster, todo, batch, opts)
    # aggregate what the trial records say, as the per-trial tasks' path does (one record format)
    recorded = [rd.load_trial(r.trial) or r for r in reused + ran + skipped]
    # node health, quarantine, the decision documents (as the DAG's aggregate), before result.json is written
    result = aggregate(rd, recorded, suite, "sweep", settings=opts.settings,
                       decide=lambda doc: dec.after_aggregate(rd.path, doc))
    return SweepResult(result, rd.path, ran, reused, skipped)


def _on_cluster(suite, plan, cluster: Cluster, todo, batch: Batch, opts: SweepOptions):
    display, rd = batch.display, batch.rd
    nodes = opts.nodes or cluster.names
    for n in nodes:
        cluster.node(n)  # unknown names -> clear error
    out = batch.decisions.excluded() if batch.decisions is not None else {}
    for why in (out[n] for n in nodes if n in out):
        display.emit(f"note: {why}")
    nodes = [n for n in nodes if n not in out]
    image = opts.image or cluster.resolve_image(plan.image)
    need = max(t.cell.topology.nodes for t in todo)
    if need > len(nodes):
        display.emit(f"note: trials needing {need} nodes cannot run on {len(nodes)} node(s)")
    with SSHPool(cluster) as pool:
        # nodes unreachable at the start are not leased; their trials end NOT_RUN naming them
        down = nodeclean.unreachable(pool, nodes)
        for why in down.values():
            display.emit(f"warning: {why}; its trials will not run")
        up = [n for n in nodes if n not in down]
        if not up:
            raise RemoteError("no node of the cluster is reachable: " + "; ".join(down.values()))
        leases = Leases(pool, up, rd.run_id, min_nodes=min(need, len(up)), ttl_s=opts.lease_ttl_s,
                        wait_s=opts.lease_wait_s,
                        on_wait=lambda busy: display.emit(f"waiting for leased nodes: {'; '.join(busy.values())}"))
        held = leases.acquire()
        runtime = None
        try:
            display.emit(f"leased nodes: {', '.join(held)}; preparing ({'docker' if suite.container else 'host'} "
                         f"runtime{', image ' + image if image else ''})")
            runtime, facts = prepare_nodes(rd, suite, cluster, pool, held, image=image, capture_env=opts.capture_env,
                                           ssh_port=opts.mpi_ssh_port, upstream_commit=plan.upstream_commit,
                                           note=display.emit)
            return run_scheduled(todo, batch, cluster, held, pool, runtime, facts, down=down)
        finally:
            if runtime is None:
                runtime = make_runtime(suite.container, image=image, registry=cluster.registry,
                                       launcher=suite.launcher)
            _, problems = nodeclean.clean_run(pool, runtime, held, rd.run_id, release_lease=False)
            for p in problems:
                display.emit(f"warning: end-of-sweep cleanup on node {p}")
            leases.release()
