"""What the LLM pretraining frameworks (Megatron-Bridge, torchtitan) share: one ``torchrun`` per
node, the cell's layout as parallel sizes, tokens/s per GPU as the trial metric.

The log parsers of the upstream formats live in their own modules (``_torchtitan_log``,
``_megatron_llm_log``); each framework names its ``Stream``. The trial metric here is tokens/s per
GPU x GPUs (the job's tokens/s) over the window; the full figures (TFLOP/s in both conventions, MFU, run checks, reference
band) are added by ``measure/llm_result.py`` from ``llm_name``.
"""

from __future__ import annotations

import statistics
from typing import Mapping

from dlperf_tasks.core.model import Cell, MetricKind, ParsedLog, Trial, TrialMetric, Window
from dlperf_tasks.frameworks._launch import env_from
from dlperf_tasks.frameworks._lines import StepSpan
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
    """The rank's environment: unbuffered output, the node's interface for NCCL/Gloo, then the
    suite's ``env:`` and ``launcher.env`` (``settings["env"]``) over them."""
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(settings.get("omp_threads", 1))}
    iface = nodes[node_rank].interface
    if iface:
        env["NCCL_SOCKET_IFNAME"] = iface
        env["GLOO_SOCKET_IFNAME"] = iface
    return env_from(settings, env)


class LlmFramework(Framework):
    """Base of the LLM pretraining frameworks: metric = the job's tokens/s over the window."""

    metric_kind = MetricKind.THROUGHPUT
    launch_mode = "per_node"
    def log_relpath(self, trial: Trial, node_rank: int = 0) -> str:
        """``logs/<framework>/<model>/<layout case>/<NnGg>/<prefix>_b<B>_<precision>_<trial>[.node<k>].log``."""
        c = trial.cell
        case = c.layout.case if c.layout is not None else "default"
        base = (f"logs/{self.log_framework}/{self.log_model}/{case}/{c.topology.name}/"
                f"{self.log_prefix}_b{c.batch_size_per_device}_{c.precision_tag}_{trial.index}")
        return base + (".log" if node_rank == 0 else f".node{node_rank}.log")

    def window_values(self, parsed: ParsedLog, window: Window) -> list[float]:
        """The logged values of the steps ``warmup < step <= warmup + measure`` (two at least)."""
        by_it = {s.iteration: s.value for s in parsed.samples}
        values = [by_it[i] for i in range(window.warmup + 1, window.total + 1) if i in by_it]
        if len(values) < 2:
            raise ValueError(f"{len(values)} logged step(s) in steps {window.warmup + 1}..{window.total}: no steady figure")
        return values

    def tokens_per_gpu(self, values: list[float], cell: Cell) -> float:
        """Tokens/s per GPU from the window's values (the framework's unit)."""
        return statistics.fmean(values)

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> TrialMetric:
        """The job's tokens/s (the seeds' convention: a cell's speed is the whole job's, per GPU is
        speed / GPUs, so speedup and scaling efficiency read as for the seed suites)."""
        per_gpu = self.tokens_per_gpu(self.window_values(parsed, window), cell)
        value = per_gpu * cell.topology.world_size
        mem = max((s.memory_mib for s in parsed.samples if getattr(s, "memory_mib", None)), default=None)
        return TrialMetric(value=value, kind=MetricKind.THROUGHPUT, throughput=value, memory_mib=mem,
                           memory_source="max reserved, caching allocator (log)" if mem else None,
                           details={"unit": "tokens/s", "tokens_per_sec_per_gpu": per_gpu})
