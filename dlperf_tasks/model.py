"""Core value types shared by planning, framework modules, statistics and reports.

Pure data, no I/O. Everything is a frozen dataclass so it can be hashed, passed
through XCom as ``to_dict()`` and rebuilt with ``from_dict()``.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf_tasks.topology import Topology


class Precision(str, enum.Enum):
    FP32 = "fp32"
    AMP = "amp"  # seeds call it fp16 in file names; see Cell.precision_tag

    def __str__(self) -> str:  # pragma: no cover
        return self.value


class MetricKind(str, enum.Enum):
    THROUGHPUT = "throughput"  # samples/s, higher is better
    LATENCY = "latency"  # ms/iteration, lower is better (Megatron)


@dataclass(frozen=True)
class ParallelLayout:
    """Megatron-style parallel case (seed 002): DP x MP(tensor) x PP = nodes x GPUs."""

    group: str  # DP | MP | 2D | PP
    case: str  # e.g. DP_1x1x1_2_1536x16
    dp: int
    mp: int
    pp: int
    micro_batch: int
    global_batch: int
    hidden_size: int
    num_heads: int
    num_layers: int
    seq_length: int = 2048

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch // (self.micro_batch * self.dp)


@dataclass(frozen=True)
class Window:
    """Which iterations count: drop ``warmup`` then measure ``measure`` (seeds: 20 / 100)."""

    warmup: int = 20
    measure: int = 100

    @property
    def total(self) -> int:
        return self.warmup + self.measure


@dataclass(frozen=True)
class Cell:
    """One point of a sweep. ``id`` is deterministic and path-safe."""

    suite: str  # catalog id, e.g. "mxnet-bert"
    framework: str  # framework module name, e.g. "mxnet_bert"
    model: str  # e.g. "bert-base"
    precision: str  # "fp32" | "amp"
    batch_size_per_device: int
    topology: Topology
    xla: bool = False
    layout: ParallelLayout | None = None
    window: Window = field(default_factory=Window)
    #: gradient accumulation steps (micro-batches per optimizer step) where the suite makes it a cell
    #: parameter (pytorch-bert, seed 001); None = not a parameter of this suite (ids unchanged)
    accumulation: int | None = None

    @property
    def gradient_accumulation_steps(self) -> int | None:
        """Alias of :attr:`accumulation` (the catalog field's name)."""
        return self.accumulation

    @property
    def precision_tag(self) -> str:
        """The tag used in DLPerf file names: fp32 / fp16."""
        return "fp16" if self.precision == "amp" else self.precision

    @property
    def id(self) -> str:
        parts = [self.suite, f"bz{self.batch_size_per_device}", self.precision_tag + ("_xla" if self.xla else "")]
        if self.accumulation is not None:
            parts.append(f"ga{self.accumulation}")
        if self.layout is not None:
            parts.append(self.layout.case)
        parts.append(self.topology.name)
        return "/".join(parts)

    @property
    def baseline_key(self) -> tuple:
        """Cells sharing this key are compared for speedup (same model, precision, xla, batch size)."""
        key = (self.suite, self.model, self.precision, self.xla, self.batch_size_per_device)
        return key if self.accumulation is None else key + (self.accumulation,)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["topology"] = self.topology.name
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Cell":
        d = dict(d)
        d["topology"] = Topology.parse(d["topology"])
        if d.get("layout"):
            d["layout"] = ParallelLayout(**d["layout"])
        d["window"] = Window(**d.get("window") or {})
        return cls(**d)


@dataclass(frozen=True)
class Trial:
    """One run of a cell. ``index`` is 1-based like DLPerf's ``_<trial>.log``."""

    cell: Cell
    index: int

    @property
    def id(self) -> str:
        return f"{self.cell.id}/t{self.index}"

    @property
    def key(self) -> str:
        """Short stable hash of the id, safe for container names and labels."""
        return hashlib.sha1(self.id.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell.to_dict(), "index": self.index}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trial":
        return cls(Cell.from_dict(d["cell"]), int(d["index"]))


@dataclass(slots=True)
class Sample:
    """One per-iteration measurement taken from a log (PerfKit-style: value + unit + metadata).

    Treat as immutable. Not ``frozen``: a frozen slots dataclass costs ~0.8 us to build against
    ~0.2 us, and extraction builds one per logged line (issue 12.4's 60 MB/s)."""

    iteration: int
    value: float  # throughput (samples/s) or latency (ms/iteration), see ``unit``
    unit: str  # "samples/s" | "ms/iter" | "s" (timestamp-only logs: value is the timestamp)
    rank: int | None = None
    timestamp: float | None = None  # seconds (absolute or relative), when the log prints one
    memory_mib: float | None = None
    loss: float | None = None  # the loss the framework printed for this iteration (mlm+nsp, lm loss...)


#: the fields of :class:`Sample`, in order: the columns of :class:`Samples`
SAMPLE_FIELDS = ("iteration", "value", "unit", "rank", "timestamp", "memory_mib", "loss")


class Samples:
    """The samples of a log or a trial, stored as columns (one list per :class:`Sample` field).

    Why: a 4n8g log has thousands of step lines; one object per line cost extraction ~20 % of its
    time (building them, then ``attrgetter`` passes in the gate and the metric). Parsers add whole
    columns (:meth:`add_columns`), the gate and the metrics read ``iteration``/``value``/... at C
    speed, and anything else sees a sequence of :class:`Sample`: iterating, indexing and
    ``reversed`` build them on demand. ``==`` compares with another Samples or any sequence of
    Sample."""

    __slots__ = SAMPLE_FIELDS

    def __init__(self, samples: Any = ()) -> None:
        # one statement per column (not a loop over the names): a trial builds a few of these
        self.iteration, self.value, self.unit, self.rank = [], [], [], []
        self.timestamp, self.memory_mib, self.loss = [], [], []
        if samples:
            self.extend(samples)

    # ------------------------------------------------------------ adding
    def add_columns(self, iteration: list, value: list, unit: Any, rank: Any = None, timestamp: Any = None,
                    memory_mib: Any = None, loss: Any = None) -> None:
        """Append ``len(iteration)`` samples. ``iteration`` and ``value`` are lists; each other
        argument is a list of the same length or one value for every sample (a str or None)."""
        n = len(iteration)
        cols = (value, unit, rank, timestamp, memory_mib, loss)
        if any(isinstance(c, list) and len(c) != n for c in cols):
            lens = [len(c) if isinstance(c, list) else "one" for c in cols]
            raise ValueError(f"Samples.add_columns: {n} iterations but columns of {lens} values "
                             "(value, unit, rank, timestamp, memory_mib, loss)")
        self.iteration += iteration
        self.value += value
        self.unit += unit if isinstance(unit, list) else [unit] * n
        self.rank += rank if isinstance(rank, list) else [rank] * n
        self.timestamp += timestamp if isinstance(timestamp, list) else [timestamp] * n
        self.memory_mib += memory_mib if isinstance(memory_mib, list) else [memory_mib] * n
        self.loss += loss if isinstance(loss, list) else [loss] * n

    def append(self, s: Sample) -> None:
        self.iteration.append(s.iteration)
        self.value.append(s.value)
        self.unit.append(s.unit)
        self.rank.append(s.rank)
        self.timestamp.append(s.timestamp)
        self.memory_mib.append(s.memory_mib)
        self.loss.append(s.loss)

    def extend(self, other: Any) -> None:
        if isinstance(other, Samples):
            self.add_columns(other.iteration, other.value, other.unit, other.rank, other.timestamp,
                             other.memory_mib, other.loss)
        else:
            for s in other:
                self.append(s)

    def __iadd__(self, other: Any) -> "Samples":
        self.extend(other)
        return self

    def clear(self) -> None:
        for name in SAMPLE_FIELDS:
            getattr(self, name).clear()

    def copy(self) -> "Samples":
        out = Samples()
        out.extend(self)
        return out

    # ------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.iteration)

    def __iter__(self):
        return map(Sample, self.iteration, self.value, self.unit, self.rank, self.timestamp, self.memory_mib,
                   self.loss)

    def __reversed__(self):
        return map(Sample, *(reversed(getattr(self, name)) for name in SAMPLE_FIELDS))

    def __getitem__(self, i):
        if isinstance(i, slice):
            out = Samples()
            for name in SAMPLE_FIELDS:
                setattr(out, name, getattr(self, name)[i])
            return out
        return Sample(*(getattr(self, name)[i] for name in SAMPLE_FIELDS))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Samples):
            return all(getattr(self, n) == getattr(other, n) for n in SAMPLE_FIELDS)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # mutable, like a list

    def __repr__(self) -> str:
        head = ", ".join(map(repr, self[:3]))
        return f"Samples({len(self)}: [{head}{', ...' if len(self) > 3 else ''}])"

    def __getstate__(self) -> dict:
        return {name: getattr(self, name) for name in SAMPLE_FIELDS}

    def __setstate__(self, state: dict) -> None:
        for name in SAMPLE_FIELDS:
            setattr(self, name, list(state[name]))


def as_samples(samples: Any) -> Samples:
    """``samples`` as a :class:`Samples` (a Samples is returned as is, a sequence of Sample copied)."""
    return samples if isinstance(samples, Samples) else Samples(samples)


@dataclass
class LogFacts:
    """Sanity facts read from a log, used by the validity gate."""

    iterations_seen: list[int] = field(default_factory=list)  # distinct iteration numbers, sorted
    ranks_seen: list[int] = field(default_factory=list)  # distinct ranks that printed iteration lines
    crash_markers: list[str] = field(default_factory=list)  # e.g. "Traceback", "NCCL error", "Killed"
    errors: list[str] = field(default_factory=list)  # parse problems (non-numeric value, garbage...)
    lines: int = 0
    # --- the run's own arguments, as the log prints them (DLE Config, gluon-nlp Namespace,
    # Megatron arguments block, a launcher trace line); None = the log does not say
    args: dict[str, str] = field(default_factory=dict)  # the raw values read (a few keys, not all)
    args_source: str = ""  # where they were read, e.g. "DLE PARAMETER Config line"
    batch_per_device: int | None = None  # micro-batch per GPU per forward/backward
    accumulation: int | None = None  # gradient accumulation steps per logged (optimizer) step
    world_size: int | None = None
    global_batch: int | None = None  # samples per optimizer step over all GPUs
    stride: int | None = None  # iterations between two logged iteration lines (log_freq, log_interval)
    final_loss: float | None = None
    nonfinite_losses: list[str] = field(default_factory=list)  # "iteration 40: lm loss = nan"
    # the framework's own throughput summary (DLE training_sequences_per_second): value + name
    framework_figure: float | None = None
    framework_figure_name: str = ""


@dataclass
class ParsedLog:
    samples: Samples = field(default_factory=Samples)  # a list of Sample is turned into Samples
    facts: LogFacts = field(default_factory=LogFacts)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. {"memory_mib": 14362}

    def __post_init__(self) -> None:
        self.samples = as_samples(self.samples)


class TrialStatus(str, enum.Enum):
    OK = "OK"
    INVALID_LOG = "INVALID_LOG"
    NODE_UNREACHABLE = "NODE_UNREACHABLE"
    LAUNCH_FAILED = "LAUNCH_FAILED"
    NONZERO_EXIT = "NONZERO_EXIT"
    TIMEOUT = "TIMEOUT"
    HANG = "HANG"
    NOT_RUN = "NOT_RUN"

    @property
    def retriable(self) -> bool:
        return self in (TrialStatus.NODE_UNREACHABLE, TrialStatus.LAUNCH_FAILED, TrialStatus.TIMEOUT, TrialStatus.HANG)


@dataclass
class TrialMetric:
    """A trial's speed per the framework's DLPerf rule."""

    value: float  # samples/s for THROUGHPUT, ms/iteration for LATENCY
    kind: MetricKind = MetricKind.THROUGHPUT
    memory_mib: float | None = None
    throughput: float | None = None  # samples/s also for LATENCY kinds (global_batch / latency)
    #: what ``memory_mib`` is and where it was read (e.g. "max reserved, torch caching allocator (log)");
    #: never an nvidia-smi figure unless it says so
    memory_source: str | None = None
    #: additive details: "framework_figure" (+ "_name"), "framework_disagreement" (fraction),
    #: "flags" (list of notes that do not invalidate), "samples_per_step", "final_loss"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrialResult:
    """Outcome of one trial: status, reason and (if valid) its metric. Invalid trials keep their raw numbers."""

    trial: Trial
    status: TrialStatus
    reason: str = ""
    metric: TrialMetric | None = None
    samples: Samples = field(default_factory=Samples)  # a list of Sample is turned into Samples
    log_paths: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # inventory names (never IPs)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        self.samples = as_samples(self.samples)

    @property
    def valid(self) -> bool:
        return self.status == TrialStatus.OK and self.metric is not None
