"""Run an A/B confirmation plan (``history/confirm.py``) with the engine.

Round by round, image A then image B, each a one-trial-per-cell sweep of the plan's cells
(``dlperf_tasks.engine.sweep.run_sweep`` with ``SweepOptions(image=..., nodes=...)``) on the SAME
nodes: the first round's nodes are kept for every later round, so A and B share hardware.
Each step is its own run dir under ``out_root`` (``r<round>-<A|B>``); the values per variant
and cell and the A/B environments come back for :func:`dlperf_tasks.history.confirm.judge`.
Used by ``dlperf confirm`` and by the suite DAG's confirmation run (conf ``{"confirm": ...}``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.cellspec import parse_cell_id
from dlperf_tasks.history.confirm import ConfirmPlan
from dlperf_tasks.catalog.plan import plan as make_plan
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep


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
    by the cluster's own registry (inventory ``registry.server``), the digest keeps it exact."""
    head, sep, rest = ref.partition("/")
    if not (sep and head.startswith("<") and ">" in head):
        return ref
    server = getattr(getattr(cluster, "registry", None), "server", None)
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
            out["transport"] = ",".join(sorted({str(x.get("network")) for x in v.values()
                                                 if isinstance(x, dict) and x.get("network")})) or None
    return out


def run_ab(plan: ConfirmPlan, suite, cluster, out_root: str | os.PathLike, *, nodes: list[str] | None = None,
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
            got = {r.trial.cell.id: (r.metric.value if r.valid else None) for r in res.all}
            for c in plan.cells:
                values[variant][c].append(got.get(c))
            envs.setdefault(variant, env_of(res.result))
            if progress:
                progress(f"confirm round {rnd} {variant} ({image}): "
                         + ", ".join(f"{c.rsplit('/', 1)[-1]}={got.get(c)}" for c in plan.cells))
    return values, envs.get("A", {}), envs.get("B", {})
