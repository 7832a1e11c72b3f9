"""A/B confirmation of a regression finding, for both drivers.

The finding's plan (:class:`dlperf_tasks.history.confirm.ConfirmPlan`, the same plan
``dlperf confirm --plan-only`` prints) runs image A (the previous good run's, by digest) and
image B (the flagged run's) round by round, A B A B, on the SAME nodes, each with the finding's
cells and one trial per round; :func:`dlperf_tasks.history.confirm.judge` gives the verdict
(``confirmed`` with the effect and its CI, or ``not_reproduced``), recorded in the flagged run's
``confirmations`` annotation. Two drivers, one module:

* ``dlperf confirm`` (:func:`run_ab`): each step is a one-trial-per-cell sweep
  (:func:`dlperf_tasks.engine.sweep.run_sweep` with ``SweepOptions(image=..., nodes=...)``), its
  own run dir under ``out_root`` (``r<round>-<A|B>``); the first round's nodes are kept for every
  later round.
* a follow-up DAG run of the suite's own DAG: the flagged run's DAG run ends with a trigger
  step; :func:`trigger_confs` turns each new throughput/scaling finding of the runs it published
  into ``{"confirm": ConfirmPlan}``. The triggered run goes through the engine's usual steps with
  a different plan: :func:`plan_confirm` (plan step: two runs of the suite, A and B, trial items
  interleaved A B A B, every item carrying its run's image, both runs pinning the same nodes:
  plan.json ``nodes``, honoured by :func:`dlperf_tasks.engine.placement.usable_nodes`, on a Slurm
  cluster file picked from ``sinfo`` by :func:`dlperf_tasks.engine.slurmitem.pin_nodes` and honoured
  by ``slurmitem.start`` (``--exclude`` of the partition's other nodes); adaptive trials off);
  prepare, trials, collect, aggregate unchanged; :func:`finish_confirm` instead of publishing
  (values and env diff from the A/B run dirs, the verdict recorded).

Loops cannot happen: a confirmation run publishes nothing, runs no regression check and its
trigger step plans nothing; a finding that already has a verdict is not planned again, and the
triggered run id is derived from the flagged run and the finding (a cleared trigger step does
not start a second run). No Airflow import here (the DAG factory wires the steps).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping

from dlperf_tasks.catalog.plan import plan as make_plan
from dlperf_tasks.catalog.validate import check_image_ref
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.engine.errors import NonRetriable
from dlperf_tasks.engine.rundir import RunDir, group_run_record, new_run_id, now_iso, read_json, write_json, write_plan
from dlperf_tasks.engine import slurmitem
from dlperf_tasks.engine.clusterconf import load_cluster
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from dlperf_tasks.history import confirm as C
from dlperf_tasks.history.cellspec import parse_cell_id
from dlperf_tasks.remote.slurm_inventory import SlurmCluster
from dlperf_tasks.store.quarantine import Quarantine

log = logging.getLogger("dlperf.confirm")
ROUNDS = 4
MAX_TRIGGERS = 3  # follow-up runs per flagged DAG run (each queues behind the DAG's active run)
KINDS = ("throughput", "scaling")


# ---- the sweep driver (dlperf confirm) ----------------------------------------------------------
def plan_for(suite, cells: list[str], trials: int = 1):
    """The suite's plan reduced to ``cells``, ``trials`` trials each (one per A/B round)."""
    topos = sorted({parse_cell_id(c).topology for c in cells})
    p = make_plan(suite, {"topologies": ",".join(topos), "trials": trials})
    missing = [c for c in cells if c not in {x.id for x in p.cells}]
    if missing:
        raise DlperfError(f"suite {suite.id} has no cell(s) {', '.join(missing)} (the finding's suite changed?)")
    keep = set(cells)
    return dataclasses.replace(p, cells=[c for c in p.cells if c.id in keep],
                               trials=[t for t in p.trials if t.trial.cell.id in keep])


def resolve_ref(ref: str, cluster) -> str:
    """An image reference as the store keeps it, made pullable: published runs have addresses and
    host names redacted (``<ip-1>:5000/nvidia/x@sha256:..``); a redacted registry part is replaced
    by the cluster's own registry (inventory ``registry.server``, a Slurm cluster file's too), the digest
    keeps it exact."""
    head, sep, rest = ref.partition("/")
    if not (sep and head.startswith("<") and ">" in head):
        return ref
    server = getattr(getattr(cluster, "registry", None), "server", None) or getattr(cluster, "registry_server", None)
    if not server:
        raise DlperfError(f"image {ref} has a redacted registry and the cluster names none; "
                          "give the images with --image-a/--image-b")
    return f"{server}/{rest}"


def env_of(result: dict[str, Any]) -> dict[str, Any]:
    run = result.get("run") or {}
    out = {k: run.get(k) for k in ("image", "image_digest") if run.get(k) is not None}
    for k, v in (run.get("env") or {}).items():
        if not isinstance(v, (dict, list)):
            out[k] = v
        elif k == "nccl_transport" and v:
            out["transport"] = ",".join(sorted({str(x.get("network")) for x in (v.values() if isinstance(v, dict) else v)
                                                 if isinstance(x, dict) and x.get("network")})) or None
    return out


def run_ab(plan: C.ConfirmPlan, suite, cluster, out_root: str | os.PathLike, *, nodes: list[str] | None = None,
           progress: Callable[[str], None] | None = None, capture_env: bool = True,
           sweep: Callable[..., Any] | None = None) -> tuple[dict[str, dict[str, list]], dict, dict]:
    """Execute ``plan`` (A B A B ...). Returns ``(values, env_a, env_b)`` with
    ``values[variant][cell_id] = [value or None per round]``."""
    sweep = sweep or run_sweep
    plan.image_a, plan.image_b = resolve_ref(plan.image_a, cluster), resolve_ref(plan.image_b, cluster)
    p = plan_for(suite, plan.cells)
    values: dict[str, dict[str, list]] = {"A": {c: [] for c in plan.cells}, "B": {c: [] for c in plan.cells}}
    envs: dict[str, dict] = {}
    held = list(nodes or plan.nodes or []) or None
    if held:
        plan.nodes = list(held)
    root = Path(out_root)
    for rnd in range(1, plan.rounds + 1):
        for variant, image in (("A", plan.image_a), ("B", plan.image_b)):
            opts = SweepOptions(image=image, nodes=held, progress=None, capture_env=capture_env, retries=1,
                                run_id=f"confirm-{plan.run_id[:60]}-r{rnd}{variant}".replace("/", "-"))
            res = sweep(suite, p, cluster, root / f"r{rnd}-{variant}", opts)
            used = sorted({n for r in res.ran for n in r.nodes})
            if held is None and used:
                held = used  # every later step runs on the nodes the first one got
                plan.nodes = used
            got = {r.trial.cell.id: (r.metric.value if r.valid and r.metric is not None else None) for r in res.all}
            for c in plan.cells:
                values[variant][c].append(got.get(c))
            envs.setdefault(variant, env_of(res.result))
            if progress:
                progress(f"confirm round {rnd} {variant} ({image}): "
                         + ", ".join(f"{c.rsplit('/', 1)[-1]}={got.get(c)}" for c in plan.cells))
    return values, envs.get("A", {}), envs.get("B", {})


# ---- the DAG driver -----------------------------------------------------------------------------
def trigger_run_id(flagged_run_id: str, finding: str) -> str:
    """The follow-up DAG run's id: stable per (flagged run, finding), Airflow-safe characters."""
    h = hashlib.sha1(f"{flagged_run_id}\0{finding}".encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_.~:+-]", "-", f"confirm__{flagged_run_id[:150]}__{h}")


def trigger_confs(run_set: Mapping[str, Any] | None, published: list[Mapping[str, Any]], store) -> list[dict]:
    """``[{"trigger_run_id", "conf": {"confirm": plan}}]`` for the new findings of the published
    runs (at most :data:`MAX_TRIGGERS`); none for a dry run or a confirmation run."""
    if not run_set or run_set.get("dry_run") or run_set.get("confirm") is not None \
            or (run_set.get("params") or {}).get("confirm"):
        return []
    out: list[dict] = []
    for p in published:
        if not (p.get("regressions") or {}).get("findings"):
            continue
        regressions = store.read_annotation(p["run_id"], "regressions") or {}
        known = (store.read_annotation(p["run_id"], C.ANNOTATION) or {}).get("findings") or {}
        rows = store.list_runs(suite=p.get("suite") or regressions.get("suite"))
        for f in regressions.get("findings") or []:
            key = f"{f.get('kind')}:{f.get('cell_id')}"
            if f.get("kind") not in KINDS or f.get("status", "regression") != "regression" or key in known:
                continue
            try:
                plan = C.plan_confirmation(regressions, key, rows, rounds=ROUNDS)
            except ValueError as exc:  # no previous good run / no image: nothing to compare
                log.warning("finding %s of %s: no A/B confirmation: %s", key, p["run_id"], exc)
                continue
            out.append({"trigger_run_id": trigger_run_id(p["run_id"], key), "conf": plan.to_conf()})
    return out[:MAX_TRIGGERS]


# ---- plan ---------------------------------------------------------------------------------------
def _image(ref: str, cluster, where: str) -> str:
    return check_image_ref(resolve_ref(ref, cluster) if cluster is not None else ref, where)


def pin_nodes(cluster, cells, settings) -> list[str]:
    """The nodes A and B both run on: the first ones (inventory order) with enough GPUs that are
    not quarantined, as many as the largest topology needs."""
    if cluster is None:
        return []
    need = max(c.topology.nodes for c in cells)
    gpus = max(c.topology.gpus_per_node for c in cells)
    out = Quarantine.for_settings(settings).nodes()
    ok = [n.name for n in cluster.nodes if n.gpus >= gpus and n.name not in out]
    if len(ok) < need:
        raise ValueError(f"A/B confirmation needs {need} node(s) with {gpus} GPUs; {len(ok)} are usable "
                         f"(quarantined: {', '.join(sorted(out)) or 'none'})")
    return ok[:need]


def _run_ids(settings, group: str, group_run_id: str | None, suite_id: str) -> dict[str, dict[str, str]]:
    """The A and B run ids of this DAG run (a cleared, re-run confirmation keeps them)."""
    path = group_run_record(settings.work_dir, group, group_run_id) if group_run_id else None
    known = (read_json(path) or {}) if path else {}
    runs = known.get("runs") if known.get("dag_run_id") == group_run_id else None
    if not (isinstance(runs, dict) and set(runs) >= {"A", "B"}):
        runs = {v: {"run_id": new_run_id(f"{suite_id[:50]}-ab{v.lower()}", group_run_id), "started_at": now_iso()}
                for v in ("A", "B")}
    if path:
        write_json(path, {"dag": group, "dag_run_id": group_run_id, "runs": runs})
    return runs


def plan_confirm(group: str, suite_ids: list[str], params: Mapping[str, Any], settings,
                 group_run_id: str | None = None) -> dict[str, Any]:
    """The run set of a confirmation run (the conf's ``confirm`` plan; see the module docstring)."""
    try:
        plan = C.ConfirmPlan.from_conf(params["confirm"])
        if plan.suite not in suite_ids:
            raise ValueError(f"suite {plan.suite} is not one of this DAG's ({', '.join(sorted(suite_ids))})")
        suite = load_suite(plan.suite, settings.catalog_path)
        cluster = load_cluster(settings)
        on_slurm = isinstance(cluster, SlurmCluster)
        plan.image_a, plan.image_b = _image(plan.image_a, cluster, "image_a"), _image(plan.image_b, cluster, "image_b")
        p = plan_for(suite, plan.cells, trials=plan.rounds)
        if cluster is not None and not on_slurm:
            bad = [n for n in plan.nodes if n not in cluster.names]
            if bad:
                raise ValueError(f"node(s) {', '.join(bad)} not in cluster {cluster.name}")
            plan.nodes = list(plan.nodes) or pin_nodes(cluster, p.cells, settings)
    except (ValueError, TypeError, DlperfError) as exc:
        raise NonRetriable(f"invalid run parameter confirm: {exc}") from None
    if on_slurm:  # from sinfo of the partition, on the login node (the conf's nodes: only those)
        plan.nodes = slurmitem.pin_nodes(settings, p.cells, list(plan.nodes) or None)
    ids = _run_ids(settings, group, group_run_id, suite.id)
    cluster_name = "local" if settings.is_local else Path(settings.cluster).name
    doc, runs, items = p.to_dict(), [], []
    for v, image in (("A", plan.image_a), ("B", plan.image_b)):
        run_id = ids[v]["run_id"]
        rd = RunDir.at(Path(settings.work_dir) / run_id, run_id)
        write_plan(rd, doc, params={**dict(params), "adaptive": False}, dag=group, dag_run_id=group_run_id,
                   started_at=ids[v]["started_at"], policy="continue", cluster=cluster_name, image=image,
                   nodes=plan.nodes, confirm={"variant": v, "finding": plan.finding, "flagged_run": plan.run_id})
        runs.append({"run_id": run_id, "run_dir": str(rd.path), "suite": suite.id, "framework": p.framework,
                     "image": image, "upstream_commit": p.upstream_commit, "started_at": ids[v]["started_at"],
                     "window": doc["window"], "n_trials": len(p.trials),
                     "summary": f"A/B confirmation of {plan.finding} ({plan.run_id}): {v} = {image}, "
                                f"{plan.rounds} round(s) on {', '.join(plan.nodes) or 'this machine'}",
                     "rerun": False, "variant": v})
    for rnd in range(1, plan.rounds + 1):  # interleaved: round 1 A, round 1 B, round 2 A, ...
        for run in runs:
            for cell_id in plan.cells:
                t = next(pt.trial for pt in p.trials if pt.trial.cell.id == cell_id and pt.trial.index == rnd)
                items.append({"run_id": run["run_id"], "run_dir": run["run_dir"], "suite": suite.id,
                              "trial": t.to_dict(), "trial_id": t.id, "key": t.key, "dry_run": False,
                              "policy": "continue", "image": run["image"]})
    return {"runs": runs, "trials": items, "trial_keys": sorted({i["key"] for i in items}), "dry_run": False,
            "policy": "continue", "cluster": cluster_name, "params": dict(params),
            "confirm": {**asdict(plan), "runs": {r["variant"]: r["run_id"] for r in runs}}}


# ---- finish -------------------------------------------------------------------------------------
def ab_values(run_set: Mapping[str, Any], plan: C.ConfirmPlan) -> tuple[dict, dict, dict]:
    """``(values[variant][cell] = [value or None per round], env_a, env_b)`` from the A/B run dirs."""
    by_id = {r["run_id"]: r for r in run_set["runs"]}
    values: dict[str, dict[str, list]] = {}
    envs: dict[str, dict] = {}
    for v, run_id in run_set["confirm"]["runs"].items():
        rd = RunDir(Path(by_id[run_id]["run_dir"]), run_id)
        got = rd.load_trials()
        values[v] = {c: [(r.metric.value if r is not None and r.valid and r.metric else None)
                         for r in (got.get(f"{c}/t{k}") for k in range(1, plan.rounds + 1))] for c in plan.cells}
        envs[v] = env_of(read_json(rd.file("result.json")) or {})
    return values, envs.get("A", {}), envs.get("B", {})


def finish_confirm(run_set: Mapping[str, Any], store, *, notify_target: str | None = None,
                   dag_run_id: str | None = None, send=None) -> dict[str, Any]:
    """Judge the A/B values and record the verdict in the flagged run's annotations (a
    confirmed finding goes to ``send(report)`` when given, else the webhook)."""
    c = dict(run_set["confirm"])
    plan = C.ConfirmPlan.from_conf({k: v for k, v in c.items() if k != "runs"})
    values, env_a, env_b = ab_values(run_set, plan)
    doc = C.judge(plan, values, env_a=env_a or None, env_b=env_b or None)
    doc["ab_runs"] = dict(c["runs"])
    if dag_run_id:
        doc["dag_run_id"] = dag_run_id
    doc["notified"] = C.record(store, doc, notify_target=notify_target, send=send)
    return doc
