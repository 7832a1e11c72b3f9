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
from dlperf_tasks.core.errors import PlanError, PlanTooLargeError
from dlperf_tasks.core.model import Cell, Trial, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks import frameworks

PLAN_SCHEMA_VERSION = 1
# size limits, checked BEFORE anything is expanded (a 32-digit node count or --trials 9999999999
# used to loop and take gigabytes); the scheduler's max_map_length is checked on top (its params module)
MAX_TRIALS_PER_CELL = 100
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64
MAX_PLAN_TRIALS = 100_000
MAX_BATCH_SIZE = 1 << 20  # samples per device; 10**24 used to be planned (issue 27.10)
MAX_ITERS = 10_000_000  # warm-up or measured steps of one trial
MAX_LIST_ITEMS = 4096  # items of one comma-separated override
_MAXIMA = {"trials": MAX_TRIALS_PER_CELL, "warmup_iters": MAX_ITERS, "measure_iters": MAX_ITERS,
           "batch_sizes": MAX_BATCH_SIZE}
PRECISIONS = ("fp32", "amp")
_PRECISION_ALIASES = {"fp32": "fp32", "amp": "amp", "fp16": "amp"}
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_XLA_WORDS = {"on": (True,), "off": (False,), "both": (False, True), "true": (True,), "false": (False,)}


def short(value: Any, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters (an error line never echoes 100 kB)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


def _split(value: Any, what: str = "list") -> list[str]:
    """``"a, b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (empty items dropped; at most
    :data:`MAX_LIST_ITEMS`)."""
    if isinstance(value, str):
        items = value.split(",", MAX_LIST_ITEMS)
    elif isinstance(value, (list, tuple)):
        items = [str(v) for v in value[:MAX_LIST_ITEMS + 1]]
    else:
        items = [str(value)]
    if len(items) > MAX_LIST_ITEMS:
        raise PlanError(f"{what}: more than {MAX_LIST_ITEMS} items")
    return [i.strip() for i in items if str(i).strip()]


def _bounded(n: int, what: str) -> int:
    top = _MAXIMA.get(what)
    if top is not None and n > top:
        unit = {"trials": " trials per cell", "batch_sizes": " samples per device"}.get(what, " steps")
        raise PlanError(f"{what}: {short(n)} is more than the maximum of {top}{unit}")
    return n


def _positive_ints(value: Any, what: str) -> tuple[int, ...]:
    out = []
    for item in _split(value, what):
        try:
            n = int(item)
        except ValueError:
            raise PlanError(f"{what}: {short(item)} is not an integer") from None
        if n < 1:
            raise PlanError(f"{what}: {short(n)} must be a positive integer")
        if _bounded(n, what) not in out:
            out.append(n)
    if not out:
        raise PlanError(f"{what}: empty list")
    return tuple(out)


def _int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise PlanError(f"{what}: {short(value)} is not an integer")
    try:
        n = int(str(value).strip())
    except ValueError:
        raise PlanError(f"{what}: {short(value)} is not an integer") from None
    if n < minimum:
        raise PlanError(f"{what}: {short(n)} must be >= {minimum}")
    return _bounded(n, what)


def check_topology_size(topo: Topology, what: str = "topologies") -> Topology:
    """Refuse node / GPU counts no cluster has (before anything loops over them)."""
    if topo.nodes > MAX_NODES or topo.gpus_per_node > MAX_GPUS_PER_NODE:
        raise PlanError(f"{what}: {str(topo.nodes)[:40]}n{str(topo.gpus_per_node)[:40]}g is too large "
                        f"(at most {MAX_NODES} nodes and {MAX_GPUS_PER_NODE} GPUs per node)")
    return topo


def parse_xla(value: Any) -> tuple[bool, ...]:
    """``on`` / ``off`` / ``both`` (or a bool, or a list of bools) -> tuple of bools."""
    if isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, bool) for v in value) and value:
            return tuple(dict.fromkeys(value))
        value = ",".join(map(str, value))
    word = str(value).strip().lower()
    if word in _XLA_WORDS:
        return _XLA_WORDS[word]
    raise PlanError(f"xla: {short(value)} is not one of on, off, both")


@dataclass(frozen=True)
class Overrides:
    """What a user may change for one run (CLI flags, Airflow params). ``None`` = the suite's default."""

    batch_sizes: tuple[int, ...] | None = None
    precisions: tuple[str, ...] | None = None
    topologies: tuple[str, ...] | None = None
    xla: tuple[bool, ...] | None = None
    trials: int | None = None
    warmup_iters: int | None = None
    measure_iters: int | None = None
    image_tag: str | None = None
    cases: tuple[str, ...] | None = None  # Megatron layout case names
    models: tuple[str, ...] | None = None
    include_excluded: bool = False  # also run combinations the suite's ``exclude`` leaves out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "Overrides":
        """Build from loose input (Airflow params, JSON): comma strings or lists; empty/None = default."""
        d = {k: v for k, v in (d or {}).items() if v is not None and v != "" and v != []}
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise PlanError(f"unknown override(s): {', '.join(sorted(unknown))}; "
                            f"known: {', '.join(cls.__dataclass_fields__)}")
        kw: dict[str, Any] = {}
        if "batch_sizes" in d:
            kw["batch_sizes"] = _positive_ints(d["batch_sizes"], "batch_sizes")
        if "precisions" in d:
            precs = []
            for p in _split(d["precisions"], "precisions"):
                if p.lower() not in _PRECISION_ALIASES:
                    raise PlanError(f"precisions: unknown precision {short(p)}; known: fp32, amp (fp16 = amp)")
                if _PRECISION_ALIASES[p.lower()] not in precs:
                    precs.append(_PRECISION_ALIASES[p.lower()])
            kw["precisions"] = tuple(precs)
        if "topologies" in d:
            kw["topologies"] = tuple(check_topology_size(Topology.parse(t)).name
                                     for t in _split(d["topologies"], "topologies"))
        if "xla" in d:
            kw["xla"] = parse_xla(d["xla"])
        if "trials" in d:
            kw["trials"] = _int(d["trials"], "trials", 1)
        if "warmup_iters" in d:
            kw["warmup_iters"] = _int(d["warmup_iters"], "warmup_iters", 0)
        if "measure_iters" in d:
            kw["measure_iters"] = _int(d["measure_iters"], "measure_iters", 1)
        if "image_tag" in d:
            kw["image_tag"] = str(d["image_tag"]).strip()
        if "cases" in d:
            kw["cases"] = tuple(_split(d["cases"], "cases"))
        if "models" in d:
            kw["models"] = tuple(_split(d["models"], "models"))
        if "include_excluded" in d:
            kw["include_excluded"] = bool(d["include_excluded"])
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            if v is None or v is False:
                continue
            out[name] = list(v) if isinstance(v, tuple) else v
        return out


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


def plan(suite: Suite, overrides: Overrides | Mapping[str, Any] | None = None,
         max_trials: int = MAX_PLAN_TRIALS) -> Plan:
    """Cells and trials of ``suite`` with ``overrides`` applied (see module docstring for the order).
    Sizes are checked before anything is expanded: more than ``max_trials`` trials is refused with
    a message naming the fields."""
    ov = overrides if isinstance(overrides, Overrides) else Overrides.from_dict(overrides)

    if ov.models is not None:
        _check_subset(ov.models, [suite.model], "model(s)", suite)
    precisions = ov.precisions if ov.precisions is not None else suite.precisions
    for p in precisions:
        if p not in PRECISIONS:
            raise PlanError(f"unknown precision {p!r}; known: {', '.join(PRECISIONS)}")
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
    _int(trials_n, "trials", 1)
    for t in topologies:
        check_topology_size(t)
    image = _image(suite, ov.image_tag)
    bzs = ov.batch_sizes if ov.batch_sizes is not None else {b for p in precisions for b in suite.batch_sizes_for(p)}
    upper = (len(suite.layouts) if suite.layouts else len(bzs) * len(topologies)) * len(precisions) * len(xla_values)
    sizes = (f"batch_sizes {len(bzs)} x precisions {len(precisions)} x xla {len(xla_values)} x topologies "
             f"{len(topologies)} x trials {trials_n}")
    if upper > MAX_PLAN_TRIALS or upper * trials_n > 10 * max(max_trials, MAX_PLAN_TRIALS):
        raise PlanTooLargeError(f"plan too large: up to {upper * trials_n} trials ({sizes}); at most {max_trials}: "
                        f"choose fewer batch_sizes, topologies or trials")

    cells: list[Cell] = []
    if suite.layouts:
        if ov.batch_sizes is not None:
            raise PlanError(f"suite {suite.id}: batch sizes come from the parallel layouts (micro batch); "
                            f"choose layouts with cases instead")
        layouts = list(suite.layouts)
        if ov.cases is not None:
            _check_subset(ov.cases, [lay.case for _, lay in layouts], "case(s)", suite)
            layouts = [(t, lay) for t, lay in layouts if lay.case in ov.cases]
        if ov.topologies is not None:
            have = {t for t, _ in layouts}
            missing = [t.name for t in topologies if t not in have]
            if missing:
                raise PlanError(f"suite {suite.id}: no parallel layout (case) for topology {', '.join(missing)}; "
                                f"layouts exist for {', '.join(sorted({t.name for t, _ in layouts}, key=lambda n: _topology_key(Topology.parse(n))))}")
            layouts = [(t, lay) for t, lay in layouts if t in topologies]
        for prec in precisions:
            for xla in xla_values:
                for topo, lay in layouts:
                    cells.append(Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision=prec,
                                      batch_size_per_device=lay.micro_batch, topology=topo, xla=xla, layout=lay,
                                      window=window))
    else:
        if ov.cases is not None:
            raise PlanError(f"suite {suite.id} has no parallel layouts; cases only apply to Megatron suites")
        for bz in ov.batch_sizes if ov.batch_sizes is not None else tuple(
                dict.fromkeys(b for p in precisions for b in suite.batch_sizes_for(p))):
            for prec in precisions:
                if ov.batch_sizes is None and bz not in suite.batch_sizes_for(prec):
                    continue
                for xla in xla_values:
                    for topo in topologies:
                        try:
                            accs = suite.accumulations_for(bz, topo)
                        except ValueError as exc:
                            raise PlanError(f"suite {suite.id}: gradient_accumulation_steps for batch {bz} on "
                                            f"{topo.name}: {exc}") from None
                        for acc in accs:
                            if not ov.include_excluded and suite.excluded(bz, prec, xla, topo, acc):
                                continue
                            cells.append(Cell(suite=suite.id, framework=suite.framework, model=suite.model,
                                              precision=prec, batch_size_per_device=bz, topology=topo, xla=xla,
                                              window=window, accumulation=acc))
    if not cells:
        raise PlanError(f"suite {suite.id}: the overrides select no cell (every combination is excluded)")
    if len(cells) * trials_n > max_trials:
        raise PlanTooLargeError(f"plan too large: {len(cells) * trials_n} trials ({len(cells)} cells from {sizes}); at most "
                        f"{max_trials}: choose fewer batch_sizes, topologies or trials")

    trials = []
    seen_logs: dict[str, str] = {}
    for cell in cells:
        for i in range(1, trials_n + 1):
            t = Trial(cell, i)
            paths = _log_paths(suite.framework, t)
            for p in paths:
                if p in seen_logs:
                    raise PlanError(f"trials {seen_logs[p]} and {t.id} would write the same log {p}; "
                                    f"the framework's log_relpath must tell these cells apart")
                seen_logs[p] = t.id
            trials.append(PlannedTrial(t, paths))
    return Plan(
        suite=suite.id, framework=suite.framework, dag=suite.dag, model=suite.model, image=image,
        upstream_commit=suite.upstream.commit if suite.upstream else "", window=window,
        timeout_s=suite.timeout_s, hang_timeout_s=suite.hang_timeout_s, cells=cells, trials=trials, overrides=ov,
    )


__all__ = ["Overrides", "Plan", "PlannedTrial", "format_table", "parse_xla", "plan"]
