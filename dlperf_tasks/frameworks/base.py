"""The shape every framework module has (cf. PerfKitBenchmarker benchmark modules).

A framework module defines one subclass of :class:`Framework` and registers it in
``dlperf_tasks.frameworks.REGISTRY``. Adding a framework = one module + one suite YAML.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from dlperf_tasks.core.model import Cell, MetricKind, ParsedLog, Trial, TrialMetric, Window
from dlperf_tasks.frameworks import preflight
from dlperf_tasks.frameworks._lines import StepSpan
from dlperf_tasks.frameworks._stream import LineParseStream, parse_with
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec


class Framework(ABC):
    """One framework's launch rules, log format and DLPerf speed rule."""

    #: registry key, equals the module name, e.g. "mxnet_bert"
    name: str = ""
    #: DLPerf log directory components: logs/<log_framework>/<log_model>/bz<B>/<N>n<G>g/...
    log_framework: str = ""
    log_model: str = ""
    #: file prefix: <log_prefix>_b<B>_<prec>_<trial>.log
    log_prefix: str = ""
    metric_kind: MetricKind = MetricKind.THROUGHPUT
    #: LLM pretraining frameworks: the name ``measure/llm_metrics`` knows them by ("" = not one)
    llm_name: str = ""
    #: "per_node" (one launcher per node: PyTorch/TF/Megatron) or "mpi" (mpirun from node 0: MXNet)
    launch_mode: str = "per_node"

    # ---- launching -------------------------------------------------------
    @abstractmethod
    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        """Command for ``nodes[node_rank]``. ``settings`` = the suite's launcher settings
        (command template pieces, env, data paths). With launch_mode "mpi" only node_rank 0 is called."""

    def checked_launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        """:meth:`launch`, then the pre-launch guard (``frameworks.preflight``): raises
        ``LaunchGuardError`` (a ValueError) when the command would train another model, precision,
        batch or world size than the cell. Every runtime launches through here."""
        spec = self.launch(trial, node_rank, nodes, settings)
        preflight.guard(self.name, trial.cell, spec.argv, settings)
        return spec

    # ---- logs ------------------------------------------------------------
    def log_relpath(self, trial: Trial, node_rank: int = 0) -> str:
        """Path of a node's log inside a run's log tree (seeds' layout). Node 0 keeps the
        DLPerf name; other nodes get ``.node<k>`` before ``.log`` so DLPerf tooling ignores them.
        XLA cells get ``_xla`` after the precision tag (``bert_b32_fp32_xla_1.log``) so they do not
        overwrite the non-XLA logs of the same batch size."""
        c = trial.cell
        prec = c.precision_tag + ("_xla" if c.xla else "")
        base = (f"logs/{self.log_framework}/{self.log_model}/bz{c.batch_size_per_device}/"
                f"{c.topology.name}/{self.log_prefix}_b{c.batch_size_per_device}_{prec}_{trial.index}")
        return base + (".log" if node_rank == 0 else f".node{node_rank}.log")

    def metrics_nodes(self, cell: Cell) -> list[int]:
        """Node ranks whose logs carry the iteration lines (Megatron: the last node)."""
        return [0]

    #: plausibility bound used when the suite gives none (catalog ``plausible_max_per_gpu``):
    #: samples/s per GPU for THROUGHPUT kinds, the latency floor (ms/iter) for LATENCY kinds
    plausible_max_per_gpu: float | None = None
    #: the incremental parser class (a ``_stream.LogStream`` subclass) of this framework
    Stream: type | None = None

    def stream(self, max_lines: int | None = None, keep_samples: bool = True):
        """An incremental parser state: ``.feed(chunk)``, ``.max_iteration``, ``.facts()``,
        ``.close()`` -> ParsedLog (see ``frameworks/_stream.py``). ``keep_samples=False``: samples
        are dropped after each fed block (constant memory; for progress watching)."""
        if self.Stream is None:
            st = LineParseStream(self, max_lines=max_lines)
        else:
            st = self.Stream(max_lines=max_lines)
        st.keep_samples = keep_samples
        return st

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        """Stream a log (lines may contain ``\\r`` / glued fragments) into samples + facts.
        Must not load more than it needs; must never raise on garbage (record it in facts.errors)."""
        return parse_with(self.stream(), lines)

    def expected_ranks(self, cell: Cell) -> list[int]:
        """Ranks that must print iteration lines (default: only rank 0 prints)."""
        return []

    def step_span(self, parsed: ParsedLog, cell: Cell, window: Window) -> StepSpan | None:
        """The two logged samples that bound the window, for a speed rule counted between two
        logged steps (``_lines.step_window``'s answer); None where the rule needs none. The gate
        computes it once and hands it to :meth:`check` and :meth:`trial_metric` as ``span``."""
        return None

    @abstractmethod
    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window,
                     span: StepSpan | None = None) -> TrialMetric:
        """The DLPerf speed rule for this framework. Call only after the validity gate passed.
        ``span``: :meth:`step_span`'s answer (None: computed here where the rule needs it)."""

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        """Framework-specific validity reasons (empty = valid). Generic checks live in stats.validity.
        ``span``: as for :meth:`trial_metric`."""
        return []
