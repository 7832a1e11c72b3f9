"""A whole sweep on a cluster: plan -> lease nodes -> prepare them once (login, pull, env
capture, in parallel) -> schedule the trials (``dlperf_tasks.scheduler``) -> run each trial
(``dlperf_tasks.remote.trial``) -> aggregate -> ``result.json`` + ``report.md``.

Output directory layout (``--out``)::

    logs/...                  node logs in the seeds' layout (Framework.log_relpath)
    trials/<trial key>.json   one file per finished trial (status, reason, raw samples, nodes)
    env.json                  environment capture of the last run into this directory
    result.json, report.md    aggregate over every trial file present

Re-running into the same ``--out`` runs only the trials without a trial file or whose
status is not OK (missing or invalid trials), then aggregates everything again.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from dlperf_tasks.errors import DlperfError, RemoteError
from dlperf_tasks.model import Cell, Trial, TrialResult, TrialStatus
from dlperf_tasks.remote import envcapture
from dlperf_tasks.remote.allocation import Leases
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import make_runtime
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.remote.trial import Progress, run_trial
from dlperf_tasks.scheduler import Job, Scheduler


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
    progress: TextIO | None = field(default_factory=lambda: sys.stderr)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


# ---- trial files ------------------------------------------------------------------------
def trial_file(out: Path, trial: Trial) -> Path:
    return out / "trials" / f"{trial.key}.json"


def save_trial(out: Path, result: TrialResult) -> None:
    from dlperf_tasks.report.result_json import trial_to_dict

    p = trial_file(out, result.trial)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = {"cell": result.trial.cell.to_dict(), "trial": trial_to_dict(result)}
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, p)


def load_trials(out: Path) -> dict[str, TrialResult]:
    """Trial id -> result for every trial file in ``out`` (unreadable files are ignored = re-run)."""
    from dlperf_tasks.report.result_json import trial_from_dict

    found: dict[str, TrialResult] = {}
    d = out / "trials"
    if not d.is_dir():
        return found
    for p in sorted(d.glob("*.json")):
        try:
            doc = json.loads(p.read_text())
            r = trial_from_dict(Cell.from_dict(doc["cell"]), doc["trial"])
        except (ValueError, KeyError, TypeError, DlperfError):
            continue
        found[r.trial.id] = r
    return found


# ---- live display -------------------------------------------------------------------------
class Display:
    """Progress lines on stderr: start, every ``every`` iterations, end of each trial."""

    def __init__(self, stream: TextIO | None, total: int, every: int = 20):
        self.stream, self.total, self.every = stream, total, every
        self.done = 0
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def emit(self, text: str) -> None:
        if self.stream is None:
            return
        with self._lock:
            ts = time.strftime("%H:%M:%S")
            print(f"[{ts}] {text}", file=self.stream, flush=True)

    def trial(self, p: Progress) -> None:
        t = p.trial
        where = ",".join(p.nodes)
        head = f"{t.cell.id} trial {t.index} on {where}"
        if p.state == "starting":
            self.emit(f"start  {head}")
        elif p.state == "running":
            last = self._last.get(t.id, 0)
            if p.iteration and (p.iteration - last >= self.every or p.iteration >= p.total > last):
                self._last[t.id] = p.iteration
                self.emit(f"       {head}: iteration {p.iteration}/{p.total}")

    def finished(self, r: TrialResult, attempt: int) -> None:
        self.done += 1
        val = f" {r.metric.value:.2f}" if r.metric and r.valid else ""
        why = f" ({r.reason[:200]})" if r.reason and not r.valid else ""
        self.emit(f"[{self.done}/{self.total}] {r.status.value}{val} {r.trial.cell.id} trial {r.trial.index} "
                  f"on {','.join(r.nodes)} (attempt {attempt}){why}")


# ---- the sweep ---------------------------------------------------------------------------
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


def run_sweep(suite, plan, cluster: Cluster, out_dir: str | os.PathLike, options: SweepOptions | None = None,
              stop_event: threading.Event | None = None) -> SweepResult:
    """Run ``plan`` (from :func:`dlperf_tasks.plan.plan`) of ``suite`` on ``cluster``; write ``out_dir``."""
    opts = options or SweepOptions()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stop_event = stop_event or threading.Event()
    run_id = opts.run_id or new_run_id()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    existing = load_trials(out)
    planned = [pt.trial for pt in plan.trials]
    reused = [existing[t.id] for t in planned if t.id in existing and existing[t.id].valid]
    todo = [t for t in planned if not (t.id in existing and existing[t.id].valid)]
    display = Display(opts.progress, len(todo))
    if reused:
        display.emit(f"{len(reused)} trial(s) already valid in {out}; running the {len(todo)} missing or invalid")

    cluster_nodes = opts.nodes or cluster.names
    for n in cluster_nodes:
        cluster.node(n)  # unknown names -> clear error
    ran: list[TrialResult] = []
    skipped: list[TrialResult] = []
    env: dict[str, Any] = {}
    facts: dict = {}
    image = opts.image or cluster.resolve_image(plan.image)
    if opts.image and suite.container is None:
        raise DlperfError(f"suite {suite.id} runs on the host (no container); --image does not apply")
    runtime = make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher,
                           ssh_port=opts.mpi_ssh_port or cluster.mpi_ssh_port)

    if todo:
        need = max(t.cell.topology.nodes for t in todo)
        if need > len(cluster_nodes):
            display.emit(f"note: trials needing {need} nodes cannot run on {len(cluster_nodes)} node(s)")
        with SSHPool(cluster) as pool:
            # nodes unreachable at the start are not leased; their trials end NOT_RUN naming them
            down = _unreachable_nodes(pool, cluster_nodes, display)
            up = [n for n in cluster_nodes if n not in down]
            if not up:
                raise RemoteError("no node of the cluster is reachable: " + "; ".join(down.values()))
            leases = Leases(pool, up, run_id, min_nodes=min(need, len(up)),
                            ttl_s=opts.lease_ttl_s, wait_s=opts.lease_wait_s,
                            on_wait=lambda busy: display.emit(f"waiting for leased nodes: {'; '.join(busy.values())}"))
            held = leases.acquire()
            try:
                display.emit(f"leased nodes: {', '.join(held)}; preparing ({runtime.kind} runtime"
                             f"{', image ' + image if image else ''})")
                facts = runtime.prepare(pool, held)  # login + pull in parallel; errors stop here
                for f in facts.values():
                    for note in f.notes:
                        display.emit(f"warning: {note}")
                if opts.capture_env:
                    env = envcapture.capture(pool, held, runtime, facts, plan.upstream_commit)
                    (out / "env.json").write_text(json.dumps(env, indent=1))
                ran, skipped = _schedule(suite, plan, cluster, held, todo, pool, runtime, facts, run_id, out, opts,
                                         display, stop_event, env, down=down)
            finally:
                _cleanup_run(pool, runtime, held, run_id, display)
                leases.release()

    finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    all_results = reused + ran + skipped
    digest = next((f.image_digest for f in facts.values() if getattr(f, "image_digest", None)), None)
    run_meta = {
        "run_id": run_id, "suite": suite.id, "framework": suite.framework, "dag_run_id": opts.dag_run_id,
        "started_at": started_at, "finished_at": finished_at, "image": image, "image_digest": digest,
        "upstream_commit": plan.upstream_commit, "cluster": cluster.subset(cluster_nodes).public_dict(),
        "env": env, "policy": opts.policy,
        "window": {"warmup": plan.window.warmup, "measure": plan.window.measure},
    }
    result = write_outputs(out, all_results, run_meta, suite)
    return SweepResult(result, out, ran, reused, skipped)


def write_outputs(out: Path, results: list[TrialResult], run_meta: dict[str, Any], suite) -> dict[str, Any]:
    """Aggregate with the stats functions and write result.json + report.md."""
    from dlperf_tasks.extract import dlperf_model_key
    from dlperf_tasks.report.markdown import render_markdown
    from dlperf_tasks.report.result_json import build_result, write_result
    from dlperf_tasks.stats import aggregate

    cells = aggregate(results)
    transports = nccl_transports(out, results)
    if transports:
        run_meta = {**run_meta, "env": {**(run_meta.get("env") or {}), "nccl_transport": transports}}
    result = build_result(cells, run_meta, dlperf_model=dlperf_model_key(suite))
    write_result(result, out / "result.json")
    (out / "report.md").write_text(render_markdown(result))
    _write_stragglers(out, results)
    return result


def nccl_transports(out: Path, results: list[TrialResult]) -> dict[str, dict[str, Any]]:
    """The NCCL transport each multi-node trial actually used (IB or Socket, read from the
    ``NCCL_DEBUG=INFO`` lines of its logs), by trial id. Trials whose logs say nothing are left out."""
    from dlperf_tasks.frameworks._lines import read_log

    found: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.trial.cell.topology.nodes < 2:
            continue
        for rel in r.log_paths:
            path = Path(out) / rel
            if not path.is_file():
                continue
            t = envcapture.nccl_transport(read_log(str(path)))
            if t["paths"] or t["network"] != envcapture.ABSENT:
                found[r.trial.id] = t
                break
    return found


def _write_stragglers(out: Path, results: list[TrialResult]) -> None:
    """Multi-node trials: compare the nodes' step times and name a slow node (stragglers.json and a
    "Stragglers" section in report.md; see dlperf_tasks.stragglers). A failure here is written into
    report.md, never raised: result.json is already there."""
    from dlperf_tasks import stragglers

    try:
        reports = stragglers.scan(results, out)
        if reports:
            stragglers.write(out, reports)
    except Exception as exc:  # noqa: BLE001
        with open(out / "report.md", "a") as f:
            f.write(f"\n{stragglers.REPORT_HEADING}\n\nstraggler check failed: {type(exc).__name__}: {exc}\n")


def _unreachable_nodes(pool: SSHPool, nodes: list[str], display: "Display") -> dict[str, str]:
    """Node -> why, for the nodes that cannot be reached over SSH right now (checked in parallel)."""
    def probe(n: str) -> str | None:
        try:
            pool.client(n)
            return None
        except RemoteError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes)))) as ex:
        found = {n: why for n, why in zip(nodes, ex.map(probe, nodes)) if why}
    for why in found.values():
        display.emit(f"warning: {why}; its trials will not run")
    return found


def _schedule(suite, plan, cluster, held, todo, pool, runtime, facts, run_id, out, opts, display, stop_event,
              env, down: dict[str, str] | None = None) -> tuple[list[TrialResult], list[TrialResult]]:
    by_id = {t.id: t for t in todo}
    jobs = [Job.from_trial(t) for t in todo]
    down = down or {}
    sched = Scheduler(jobs, {n: cluster.node(n).gpus for n in [*held, *down]}, opts.policy, opts.cooldown_s)
    for n in down:  # unreachable at the start: counted as down, so the reason names them
        sched.mark_down(n)
    attempts: dict[str, int] = {}
    ran: list[TrialResult] = []
    skipped: list[TrialResult] = []
    last: dict[str, TrialResult] = {}
    t0 = time.monotonic()

    def drop_impossible() -> None:
        for job in sched.drop_impossible():
            trial = by_id[job.key]
            prev = last.get(job.key)
            why = (f"needs {job.nodes} node(s) with {job.gpus_per_node} GPUs; available: "
                   f"{len([n for n in held if n not in sched.down])} (down: {', '.join(sorted(sched.down)) or 'none'})")
            why += "".join(f"; {down[n]}" for n in sorted(sched.down) if n in down)
            r = prev or TrialResult(trial, TrialStatus.NOT_RUN, why)
            if prev is None:
                save_trial(out, r)
            skipped.append(r)
            display.emit(f"skip   {trial.cell.id} trial {trial.index}: {why}")

    with ThreadPoolExecutor(max_workers=max(1, len(held))) as ex:
        running: dict[Future, tuple[Job, list[str]]] = {}
        try:
            drop_impossible()
            while not sched.finished:
                if stop_event.is_set():
                    raise KeyboardInterrupt("stop requested")
                now = time.monotonic() - t0
                for a in sched.next_starts(now):
                    trial = by_id[a.job.key]
                    attempts[a.job.key] = attempts.get(a.job.key, 0) + 1
                    fut = ex.submit(run_trial, cluster, a.nodes, trial, suite, run_id, out, pool=pool, runtime=runtime,
                                    facts=facts, attempt=attempts[a.job.key], poll_s=opts.poll_s,
                                    unreachable_grace_s=opts.unreachable_grace_s, progress=display.trial,
                                    stop_event=stop_event)
                    running[fut] = (a.job, a.nodes)
                if not running:
                    t = sched.next_free_time(now)
                    if t is None:
                        drop_impossible()
                        if not sched.running and sched.pending:  # cannot happen after drop_impossible
                            break
                        continue
                    time.sleep(max(0.0, t - now))
                    continue
                done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
                for fut in done:
                    job, nodes = running.pop(fut)
                    sched.finish(job.key, time.monotonic() - t0)
                    try:
                        r = fut.result()
                    except Exception as exc:  # noqa: BLE001 - a runner bug must not kill the sweep
                        r = TrialResult(by_id[job.key], TrialStatus.LAUNCH_FAILED,
                                        f"runner error: {type(exc).__name__}: {exc}", nodes=nodes)
                    last[job.key] = r
                    display.finished(r, attempts[job.key])
                    if r.status == TrialStatus.NODE_UNREACHABLE:
                        for n in _down_nodes(pool, nodes):
                            sched.mark_down(n)
                            display.emit(f"node {n} is unreachable; no further trials on it")
                    if r.status.retriable and attempts[job.key] <= opts.retries:
                        sched.requeue(job)
                        drop_impossible()
                        continue
                    save_trial(out, r)
                    ran.append(r)
                    drop_impossible()
        except BaseException:
            stop_event.set()  # running trials kill + clean up themselves
            for fut in list(running):
                try:
                    fut.result(timeout=120)
                except BaseException:  # noqa: BLE001
                    pass
            raise
    return ran, skipped


def _cleanup_run(pool: SSHPool, runtime, nodes: list[str], run_id: str, display: Display) -> None:
    """End of sweep, on every leased node: remove any container of the run and the run's scratch
    directory (container log mounts, the per-run MPI key pair)."""
    import shlex

    from dlperf_tasks.remote.runtime import safe_name

    def one(n: str) -> None:
        try:
            runtime.cleanup(pool, n, run_id)
            wd = pool.cluster.node(n).workdir.rstrip("/")
            pool.run(n, f"rm -rf {shlex.quote(f'{wd}/runs/{safe_name(run_id)}')}", timeout=60)
        except RemoteError as exc:
            display.emit(f"warning: end-of-sweep cleanup on node {n} failed: {exc}")

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
        list(ex.map(one, nodes))


def _down_nodes(pool: SSHPool, nodes: list[str]) -> list[str]:
    down = []
    for n in nodes:
        try:
            pool.run(n, "true", timeout=5, retries=1)
        except RemoteError:
            down.append(n)
    return down
