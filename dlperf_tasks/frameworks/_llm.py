"""What the LLM pretraining frameworks (Megatron-Bridge, torchtitan) share: one ``torchrun`` per
node, the cell's layout as parallel sizes, tokens/s per GPU as the trial metric.

The log parsers of the upstream formats live in their own modules; until one is wired to a
framework, its ``parse`` returns no samples and one error naming the format, so a trial is
refused by the validity gate instead of measured wrongly.
"""

from __future__ import annotations

import statistics
from typing import Iterable, Mapping

from dlperf_tasks.core.model import Cell, MetricKind, ParsedLog, Trial, TrialMetric, Window
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.frameworks.launchspec import NodeSpec


def torchrun_prefix(trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> list[str]:
    """``python -m torch.distributed.run`` with this node's rank and the rendezvous on node 0."""
    topo = trial.cell.topology
    if not 0 <= node_rank < topo.nodes or len(nodes) < topo.nodes:
        raise ValueError(f"node_rank {node_rank} / {len(nodes)} nodes do not fit topology {topo.name}")
    return [str(settings.get("python", "python3")), "-m", "torch.distributed.run",
            f"--nnodes={topo.nodes}", f"--nproc_per_node={topo.gpus_per_node}", f"--node_rank={node_rank}",
            f"--master_addr={nodes[0].address}", f"--master_port={int(settings.get('master_port', 29500))}"]


def node_env(node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> dict[str, str]:
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(settings.get("omp_threads", 1))}
    iface = nodes[node_rank].interface
    if iface:
        env["NCCL_SOCKET_IFNAME"] = iface
        env["GLOO_SOCKET_IFNAME"] = iface
    return env


class LlmFramework(Framework):
    """Base of the LLM pretraining frameworks: metric = tokens/s per GPU over the window."""

    metric_kind = MetricKind.THROUGHPUT
    launch_mode = "per_node"
    #: the upstream log format's name, for the error while no parser is wired
    log_format = ""

    def log_relpath(self, trial: Trial, node_rank: int = 0) -> str:
        """``logs/<framework>/<model>/<layout case>/<NnGg>/<prefix>_b<B>_<precision>_<trial>[.node<k>].log``."""
        c = trial.cell
        case = c.layout.case if c.layout is not None else "default"
        base = (f"logs/{self.log_framework}/{self.log_model}/{case}/{c.topology.name}/"
                f"{self.log_prefix}_b{c.batch_size_per_device}_{c.precision_tag}_{trial.index}")
        return base + (".log" if node_rank == 0 else f".node{node_rank}.log")

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        parsed = ParsedLog()
        for raw in lines:
            parsed.facts.lines += str(raw).count("\n") + 1
        parsed.facts.errors.append(f"no parser wired for the {self.log_format} log format ({self.name})")
        return parsed

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        by_it = {s.iteration: s.value for s in parsed.samples}
        values = [by_it[i] for i in range(window.warmup + 1, window.total + 1) if i in by_it]
        if not values:
            raise ValueError(f"no tokens/s samples in steps {window.warmup + 1}..{window.total}")
        mean = statistics.fmean(values)
        return TrialMetric(value=mean, kind=MetricKind.THROUGHPUT, throughput=mean)
