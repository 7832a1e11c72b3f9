"""What a user may change for one run (:class:`Overrides`, from CLI flags or Airflow params), parsed
from loose input, and the size limits checked before a plan expands anything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dlperf_tasks.core.errors import PlanError
from dlperf_tasks.core.topology import Topology

# size limits, checked BEFORE anything is expanded (a 32-digit node count or --trials 9999999999
# used to loop and take gigabytes); the scheduler's max_map_length is checked on top (its params module)
MAX_TRIALS_PER_CELL = 100
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64
MAX_PLAN_TRIALS = 100_000
MAX_BATCH_SIZE = 1 << 20  # samples per device; 10**24 used to be planned
MAX_ITERS = 10_000_000  # warm-up or measured steps of one trial
MAX_LIST_ITEMS = 4096  # items of one comma-separated override
_MAXIMA = {"trials": MAX_TRIALS_PER_CELL, "warmup_iters": MAX_ITERS, "measure_iters": MAX_ITERS,
           "batch_sizes": MAX_BATCH_SIZE}
PRECISIONS = ("fp32", "amp")
_PRECISION_ALIASES = {"fp32": "fp32", "amp": "amp", "fp16": "amp"}
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


def bounded_int(value: Any, what: str, minimum: int) -> int:
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


#: the run parameters (a triggered conf, the CLI's flags) that become a plan's overrides
RUN_OVERRIDE_KEYS = ("batch_sizes", "precisions", "topologies", "trials", "warmup_iters", "measure_iters",
                     "image_tag", "xla")


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
    def from_params(cls, params: Mapping[str, Any]) -> "Overrides":
        """The overrides a run's parameters ask for (:data:`RUN_OVERRIDE_KEYS`; other keys are not plan overrides)."""
        return cls.from_dict({k: params[k] for k in RUN_OVERRIDE_KEYS if k in params})

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
            kw["trials"] = bounded_int(d["trials"], "trials", 1)
        if "warmup_iters" in d:
            kw["warmup_iters"] = bounded_int(d["warmup_iters"], "warmup_iters", 0)
        if "measure_iters" in d:
            kw["measure_iters"] = bounded_int(d["measure_iters"], "measure_iters", 1)
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
