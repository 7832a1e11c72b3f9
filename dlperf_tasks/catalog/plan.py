"""Turn a suite (+ user overrides) into cells and trials.

    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.plan import Overrides, plan
    p = plan(load_suite("mxnet-bert"), Overrides(topologies=("1n1g", "1n8g"), trials=3))
    print(p.summary())

Cell order is deterministic: batch size (suite/override order), precision, XLA off before on,
then topology by world size (1n1g, 1n2g, ..., 1n8g, 2n8g, 4n8g, 10n8g, 16n8g). Megatron suites
keep the order of their layout table. Trials are numbered 1..N per cell, and the plan records each
trial's log path per node (the framework's ``log_relpath``, i.e. DLPerf's
``logs/<framework>/<model>/bz<B>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.log``).

``Plan.to_dict()`` / ``Plan.from_dict()`` round-trip through JSON (Airflow XCom).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from dlperf_tasks.catalog.model import Suite
from dlperf_tasks.catalog.overrides import (MAX_PLAN_TRIALS, PRECISIONS, Overrides, bounded_int, check_topology_size,
                                            parse_xla, short)
from dlperf_tasks.core.errors import PlanError, PlanTooLargeError
from dlperf_tasks.core.model import Cell, Trial, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks import frameworks

PLAN_SCHEMA_VERSION = 1
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class PlannedTrial:
    trial: Trial
    log_paths: tuple[str, ...]  # one per node rank, node 0 first

    @property
    def id(self) -> str:
        return self.trial.id


@dataclass
class Plan:
    suite: str
    framework: str
    dag: str
    model: str
    image: str | None  # None = host runtime
    upstream_commit: str
    window: Window
    timeout_s: int
    hang_timeout_s: int
    cells: list[Cell]
    trials: list[PlannedTrial]
    overrides: Overrides = field(default_factory=Overrides)
    #: the digest the catalog pins for ``image`` (None: not pinned, or another tag was asked for)
    image_digest: str | None = None

    def trials_of(self, cell: Cell) -> list[PlannedTrial]:
        return [t for t in self.trials if t.trial.cell.id == cell.id]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": PLAN_SCHEMA_VERSION,
            "suite": self.suite,
            "framework": self.framework,
            "dag": self.dag,
            "model": self.model,
            "image": self.image,
            "image_digest": self.image_digest,
            "upstream_commit": self.upstream_commit,
            "window": self.window.to_dict(),
            "timeout_s": self.timeout_s,
            "hang_timeout_s": self.hang_timeout_s,
            "overrides": self.overrides.to_dict(),
            "cells": [{"cell_id": c.id, **c.to_dict()} for c in self.cells],
            "trials": [
                {"trial_id": t.id, "key": t.trial.key, "cell_id": t.trial.cell.id, "index": t.trial.index,
                 "log_paths": list(t.log_paths)}
                for t in self.trials
            ],
            "n_cells": len(self.cells),
            "n_trials": len(self.trials),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        if d.get("schema_version") != PLAN_SCHEMA_VERSION:
            raise PlanError(f"plan schema_version {d.get('schema_version')!r} is not {PLAN_SCHEMA_VERSION}")
        cells = []
        by_id: dict[str, Cell] = {}
        for cd in d["cells"]:
            cd = {k: v for k, v in cd.items() if k != "cell_id"}
            cell = Cell.from_dict(cd)
            cells.append(cell)
            by_id[cell.id] = cell
        trials = []
        for td in d["trials"]:
            if td["cell_id"] not in by_id:
                raise PlanError(f"plan trial {td.get('trial_id')!r} refers to unknown cell {td['cell_id']!r}")
            trials.append(PlannedTrial(Trial(by_id[td["cell_id"]], int(td["index"])), tuple(td["log_paths"])))
        return cls(
            suite=d["suite"], framework=d["framework"], dag=d["dag"], model=d["model"], image=d.get("image"),
            upstream_commit=d.get("upstream_commit", ""), window=Window(**d["window"]),
            timeout_s=int(d["timeout_s"]), hang_timeout_s=int(d["hang_timeout_s"]),
            cells=cells, trials=trials, overrides=Overrides.from_dict(d.get("overrides")),
            image_digest=d.get("image_digest"),
        )

    def summary(self) -> str:
        """A plain-text table: one row per cell, then the totals."""
        layout = any(c.layout for c in self.cells)
        head = ["#", "cell", "bz/dev", "precision", "xla", "topology", "gpus"]
        if layout:
            head += ["dp", "mp", "pp", "global_bz"]
        accumulation = any(c.accumulation is not None for c in self.cells)
        if accumulation:
            head += ["grad_acc", "samples/step"]
        head += ["trials"]
        rows = []
        for i, c in enumerate(self.cells, 1):
            row = [str(i), c.id, str(c.batch_size_per_device), c.precision, "on" if c.xla else "off",
                   c.topology.name, str(c.topology.world_size)]
            if layout:
                lay = c.layout
                row += [str(lay.dp), str(lay.mp), str(lay.pp), str(lay.global_batch)] if lay else ["", "", "", ""]
            if accumulation:
                acc = c.accumulation or 1
                row += [str(acc), str(acc * c.batch_size_per_device * c.topology.world_size)]
            row.append(str(len(self.trials_of(c))))
            rows.append(row)
        lines = [f"suite {self.suite} (framework {self.framework}, model {self.model}, "
                 f"image {self.image or 'host runtime'})",
                 (f"window: drop {self.window.warmup} iterations, measure {self.window.measure}; "
                  if self.window.rule == "timestamps" else
                  f"speed: the framework's own summary figure after {self.window.measure} steps, cross-checked "
                  "against the step timestamps; ") +
                 f"timeout {self.timeout_s}s per trial, hang watchdog {self.hang_timeout_s}s",
                 format_table(head, rows),
                 f"{len(self.cells)} cells, {len(self.trials)} trials"]
        return "\n".join(lines)


def format_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    fmt = lambda r: "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def _topology_key(t: Topology) -> tuple[int, int]:
    return (t.world_size, t.nodes)


def _image(suite: Suite, tag: str | None) -> str | None:
    if suite.container is None:
        if tag:
            raise PlanError(f"suite {suite.id} runs on the host (no container); --image-tag does not apply")
        return None
    image = suite.container.image
    if not tag:
        return image
    if not _TAG_RE.match(tag):
        raise PlanError(f"image tag {short(tag)} is invalid (letters, digits, '_', '.', '-'; at most 128 characters)")
    repo = image.split("@", 1)[0]
    if repo.rfind(":") > repo.rfind("/"):
        repo = repo[: repo.rfind(":")]
    return f"{repo}:{tag}"


def _log_paths(framework_name: str, trial: Trial) -> tuple[str, ...]:
    """Per node rank log paths: the framework module owns its log names (Framework.log_relpath)."""
    fw = frameworks.get(framework_name)
    return tuple(fw.log_relpath(trial, r) for r in range(trial.cell.topology.nodes))


def _check_subset(asked: Iterable, known: Iterable, what: str, suite: Suite) -> None:
    missing = [a for a in asked if a not in known]
    if missing:
        raise PlanError(f"suite {suite.id}: unknown {what} {', '.join(map(str, missing))}; "
                        f"the suite has: {', '.join(map(str, known))}")


@dataclass(frozen=True)
class _Axes:
    """What a plan varies, once the overrides are applied to the suite's defaults."""

    precisions: tuple[str, ...]
    xla: tuple[bool, ...]
    topologies: list[Topology]
    window: Window
    trials: int


def _axes(suite: Suite, ov: Overrides) -> _Axes:
    """The suite's defaults with ``ov`` applied, each checked (precisions, XLA, topology sizes, trials)."""
    if ov.models is not None:
        _check_subset(ov.models, [suite.model], "model(s)", suite)
    precisions = ov.precisions if ov.precisions is not None else suite.precisions
    llm = ("bf16", "fp8")  # the LLM suites' precisions: only where the suite lists them, and only theirs there
    for p in precisions:
        if p not in PRECISIONS:
            raise PlanError(f"unknown precision {p!r}; known: {', '.join(PRECISIONS)}")
        if p not in suite.precisions and (p in llm or any(q in llm for q in suite.precisions)):
            raise PlanError(f"precision {p!r} is not one of suite {suite.id}'s precisions "
                            f"({', '.join(suite.precisions)}): its framework has no launch for it")
    xla_values = ov.xla if ov.xla is not None else suite.xla
    if any(xla_values) and not any(suite.xla):
        raise PlanError(f"suite {suite.id} ({suite.framework}) does not support XLA; use --xla off")
    if ov.topologies is not None:
        topologies = [Topology.parse(t) for t in ov.topologies]
    else:
        topologies = list(suite.topologies)
    topologies = sorted(dict.fromkeys(topologies), key=_topology_key)
    window = Window(
        warmup=ov.warmup_iters if ov.warmup_iters is not None else suite.window.warmup,
        measure=ov.measure_iters if ov.measure_iters is not None else suite.window.measure,
        rule=suite.window.rule,
    )
    trials_n = ov.trials if ov.trials is not None else suite.trials
    if trials_n < 1:
        raise PlanError(f"trials: {trials_n} must be >= 1")
    bounded_int(trials_n, "trials", 1)
    for t in topologies:
        check_topology_size(t)
    return _Axes(tuple(precisions), tuple(xla_values), topologies, window, trials_n)


def _check_upper_bound(suite: Suite, ov: Overrides, ax: _Axes, max_trials: int) -> str:
    """Refuse a plan that could only be too large (before any cell is made); return the sizes text."""
    bzs = ov.batch_sizes if ov.batch_sizes is not None else {b for p in ax.precisions for b in suite.batch_sizes_for(p)}
    upper = ((len(suite.layouts) if suite.layouts else len(bzs) * len(ax.topologies)) * len(ax.precisions)
             * len(ax.xla))
    sizes = (f"batch_sizes {len(bzs)} x precisions {len(ax.precisions)} x xla {len(ax.xla)} x topologies "
             f"{len(ax.topologies)} x trials {ax.trials}")
    if upper > MAX_PLAN_TRIALS or upper * ax.trials > 10 * max(max_trials, MAX_PLAN_TRIALS):
        raise PlanTooLargeError(f"plan too large: up to {upper * ax.trials} trials ({sizes}); at most {max_trials}: "
                        f"choose fewer batch_sizes, topologies or trials")
    return sizes


def _layout_cells(suite: Suite, ov: Overrides, ax: _Axes) -> list[Cell]:
    """The cells of a suite with parallel layouts (Megatron): one per layout, precision and XLA value."""
    if ov.batch_sizes is not None:
        raise PlanError(f"suite {suite.id}: batch sizes come from the parallel layouts (micro batch); "
                        f"choose layouts with cases instead")
    layouts = list(suite.layouts)
    if ov.cases is not None:
        _check_subset(ov.cases, [lay.case for _, lay in layouts], "case(s)", suite)
        layouts = [(t, lay) for t, lay in layouts if lay.case in ov.cases]
    if ov.topologies is not None:
        have = {t for t, _ in layouts}
        missing = [t.name for t in ax.topologies if t not in have]
        if missing:
            raise PlanError(f"suite {suite.id}: no parallel layout (case) for topology {', '.join(missing)}; "
                            f"layouts exist for {', '.join(sorted({t.name for t, _ in layouts}, key=lambda n: _topology_key(Topology.parse(n))))}")
        layouts = [(t, lay) for t, lay in layouts if t in ax.topologies]
    return [Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision=prec,
                 batch_size_per_device=lay.micro_batch, topology=topo, xla=xla, layout=lay, window=ax.window)
            for prec in ax.precisions for xla in ax.xla for topo, lay in layouts]


def _grid_cells(suite: Suite, ov: Overrides, ax: _Axes) -> list[Cell]:
    """The cells of a suite without layouts: batch size x precision x XLA x topology x gradient
    accumulation, less the suite's ``exclude`` (unless ``include_excluded``)."""
    if ov.cases is not None:
        raise PlanError(f"suite {suite.id} has no parallel layouts; cases only apply to Megatron suites")
    cells = []
    for bz in ov.batch_sizes if ov.batch_sizes is not None else tuple(
            dict.fromkeys(b for p in ax.precisions for b in suite.batch_sizes_for(p))):
        for prec in ax.precisions:
            if ov.batch_sizes is None and bz not in suite.batch_sizes_for(prec):
                continue
            for xla in ax.xla:
                for topo in ax.topologies:
                    cells += [Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision=prec,
                                   batch_size_per_device=bz, topology=topo, xla=xla, window=ax.window,
                                   accumulation=acc)
                              for acc in _accumulations(suite, bz, topo)
                              if ov.include_excluded or not suite.excluded(bz, prec, xla, topo, acc)]
    return cells


def _accumulations(suite: Suite, bz: int, topo: Topology) -> tuple[int | None, ...]:
    try:
        return suite.accumulations_for(bz, topo)
    except ValueError as exc:
        raise PlanError(f"suite {suite.id}: gradient_accumulation_steps for batch {bz} on "
                        f"{topo.name}: {exc}") from None


def _planned_trials(framework: str, cells: list[Cell], trials_n: int) -> list[PlannedTrial]:
    """Trials 1..N of every cell with their log paths; two trials writing one log is refused."""
    trials = []
    seen_logs: dict[str, str] = {}
    for cell in cells:
        for i in range(1, trials_n + 1):
            t = Trial(cell, i)
            paths = _log_paths(framework, t)
            for p in paths:
                if p in seen_logs:
                    raise PlanError(f"trials {seen_logs[p]} and {t.id} would write the same log {p}; "
                                    f"the framework's log_relpath must tell these cells apart")
                seen_logs[p] = t.id
            trials.append(PlannedTrial(t, paths))
    return trials


def plan(suite: Suite, overrides: Overrides | Mapping[str, Any] | None = None,
         max_trials: int = MAX_PLAN_TRIALS) -> Plan:
    """Cells and trials of ``suite`` with ``overrides`` applied (see module docstring for the order).
    Sizes are checked before anything is expanded: more than ``max_trials`` trials is refused with
    a message naming the fields."""
    ov = overrides if isinstance(overrides, Overrides) else Overrides.from_dict(overrides)
    ax = _axes(suite, ov)
    image = _image(suite, ov.image_tag)
    sizes = _check_upper_bound(suite, ov, ax, max_trials)
    cells = _layout_cells(suite, ov, ax) if suite.layouts else _grid_cells(suite, ov, ax)
    if not cells:
        raise PlanError(f"suite {suite.id}: the overrides select no cell (every combination is excluded)")
    if len(cells) * ax.trials > max_trials:
        raise PlanTooLargeError(f"plan too large: {len(cells) * ax.trials} trials ({len(cells)} cells from {sizes}); "
                        f"at most {max_trials}: choose fewer batch_sizes, topologies or trials")
    return Plan(
        suite=suite.id, framework=suite.framework, dag=suite.dag, model=suite.model, image=image,
        upstream_commit=suite.upstream.commit if suite.upstream else "", window=ax.window,
        timeout_s=suite.timeout_s, hang_timeout_s=suite.hang_timeout_s, cells=cells,
        trials=_planned_trials(suite.framework, cells, ax.trials), overrides=ov,
        image_digest=suite.container.digest if suite.container is not None and image == suite.container.image else None,
    )


__all__ = ["Overrides", "Plan", "PlannedTrial", "format_table", "parse_xla", "plan"]
