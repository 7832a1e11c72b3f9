"""Core value types shared by planning, framework modules, statistics and reports.

Pure data, no I/O. Everything is a frozen dataclass so it can be hashed, passed
through XCom as ``to_dict()`` and rebuilt with ``from_dict()``.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from dlperf_tasks.core.digest import sha1_hex
from dlperf_tasks.core.samples import Sample, Samples, as_samples  # noqa: F401 (Sample re-exported)
from dlperf_tasks.core.topology import Topology


class Precision(str, enum.Enum):
    FP32 = "fp32"
    AMP = "amp"  # seeds call it fp16 in file names; see Cell.precision_tag
    BF16 = "bf16"  # LLM suites: bfloat16 compute
    FP8 = "fp8"  # LLM suites: FP8 compute (Megatron-Bridge fp8_cs, torchtitan Float8 tensorwise)

    def __str__(self) -> str:  # pragma: no cover
        return self.value


class MetricKind(str, enum.Enum):
    THROUGHPUT = "throughput"  # samples/s, higher is better
    LATENCY = "latency"  # ms/iteration, lower is better (Megatron)


@dataclass(frozen=True, slots=True)
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
    cp: int = 1  # context-parallel size (LLM suites); dp*mp*pp*cp = nodes*GPUs
    vp: int = 1  # virtual pipeline stages per rank (Megatron interleaved schedule)

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch // (self.micro_batch * self.dp)


@dataclass(frozen=True, slots=True)
class Window:
    """Which iterations count: drop ``warmup`` then measure ``measure`` (seeds: 20 / 100)."""

    warmup: int = 20
    measure: int = 100
    #: the speed rule: ``timestamps`` (DLPerf's: samples over the window's wall time, from the step
    #: lines) or ``summary`` (the framework's own final figure, e.g. DLE's ``training_sequences_per_second``
    #: as seed 001 published it; ``measure`` is then the optimizer steps the run must complete and the
    #: step timestamps only cross-check it). See :data:`SPEED_RULES`.
    rule: str = "timestamps"

    def __post_init__(self) -> None:
        if self.rule not in SPEED_RULES:
            raise ValueError(f"unknown speed rule {self.rule!r}; known: {', '.join(SPEED_RULES)}")

    @property
    def total(self) -> int:
        return self.warmup + self.measure

    def to_dict(self) -> dict:
        """The plan's / result's ``window`` (``rule`` only when it is not the default: older readers)."""
        d: dict[str, Any] = {"warmup": self.warmup, "measure": self.measure}
        if self.rule != "timestamps":
            d["rule"] = self.rule
        return d


#: speed rules a suite (``window.rule``) or ``dlperf extract --speed-rule`` may name
SPEED_RULES = ("timestamps", "summary")


@dataclass(frozen=True, slots=True)
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


def trial_key(trial_id: str) -> str:
    """:attr:`Trial.key` of the trial whose id is ``trial_id``."""
    return sha1_hex(trial_id.encode())[:12]


@dataclass(frozen=True, slots=True)
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
        return trial_key(self.id)

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell.to_dict(), "index": self.index}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trial":
        return cls(Cell.from_dict(d["cell"]), int(d["index"]))


@dataclass(slots=True)
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
    #: optimizer steps skipped for an AMP loss-scale overflow: the same step number logged again with a
    #: later timestamp and nothing in between (DLE); the work was done, so each is one more step of samples
    skipped_steps: int = 0


@dataclass(slots=True)
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
    #: not needed: the adaptive rule stopped its cell before this trial (docs/decisions.md); no
    #: failure and no invalid trial, left out of the statistics
    SKIPPED = "SKIPPED"

    @property
    def retriable(self) -> bool:
        return self in (TrialStatus.NODE_UNREACHABLE, TrialStatus.LAUNCH_FAILED, TrialStatus.TIMEOUT, TrialStatus.HANG)


@dataclass(slots=True)
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


@dataclass(slots=True)
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
    #: what each node ran the trial with: ``{node: {"gpu_model": nvidia-smi name, "image_digest": repo@sha256}}``
    node_env: dict[str, dict[str, str | None]] = field(default_factory=dict)
    #: the interconnect probe run on the trial's nodes before it (multi-node cells; engine/probe.py)
    interconnect: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.samples = as_samples(self.samples)

    @property
    def valid(self) -> bool:
        return self.status == TrialStatus.OK and self.metric is not None
