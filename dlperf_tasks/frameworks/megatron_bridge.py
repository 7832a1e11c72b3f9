"""Megatron-Bridge performance recipes: ``scripts/performance/run_script.py`` under ``torchrun``.

The command is the one the recipe's own launcher (``setup_experiment.py``) has each rank run, read
at the pinned commit (``frameworks/entry_flags.json`` names it): ``-m`` model family, ``-mr``
recipe, ``-g`` GPU, ``-c`` compute dtype (bf16 | fp8_cs | fp8_mx | fp8_sc | nvfp4), ``--task
pretrain``, ``--data mock``, and the parallel sizes and batch of the cell's layout as the flat
performance recipe's overrides (``-tp -pp -vp -cp -mb -gb -sl -ms``).

Launcher settings (suite YAML ``launcher:``): ``model_family`` (e.g. llama), ``recipe`` (e.g.
llama3_8b), ``gpu`` (h100, b200, gb200...), ``script_path`` (default
``scripts/performance/run_script.py``), ``workdir``, ``python``, ``master_port``,
``compute_dtype`` (precision -> recipe dtype; default bf16 -> bf16, fp8 -> fp8_cs), ``extra_args``.
"""

from __future__ import annotations

from typing import Mapping

import statistics

from dlperf_tasks.core.model import Cell, Trial
from dlperf_tasks.frameworks._megatron_llm_log import MegatronLlmStream
from dlperf_tasks.frameworks._llm import LlmFramework, node_env, torchrun_prefix
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

SCRIPT = "scripts/performance/run_script.py"
#: dlperf precision -> run_script.py --compute_dtype (FP8 = current scaling, as the published H100 tables)
COMPUTE_DTYPE = {"bf16": "bf16", "fp8": "fp8_cs"}


class MegatronBridge(LlmFramework):
    name = "megatron_bridge"
    log_framework = "megatron_bridge"
    log_model = "llama"
    log_prefix = "megatron_bridge"
    llm_name = "megatron_bridge"
    Stream = MegatronLlmStream  # samples: elapsed time per iteration, ms

    def tokens_per_gpu(self, values: list[float], cell: Cell) -> float:
        """Global batch x sequence / mean step time / world size."""
        lay = cell.layout
        if lay is None:
            raise ValueError(f"cell {cell.id} has no layout: no global batch and sequence length")
        return lay.global_batch * lay.seq_length / (statistics.fmean(values) / 1000.0) / cell.topology.world_size

    def metrics_nodes(self, cell) -> list[int]:
        return [cell.topology.nodes - 1]  # Megatron prints the iteration lines on the last rank

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell, lay = trial.cell, trial.cell.layout
        if lay is None:
            raise ValueError(f"{self.name}: cell {cell.id} has no layout (the suite's layouts give the parallel sizes)")
        dtypes = {**COMPUTE_DTYPE, **dict(settings.get("compute_dtype") or {})}
        if cell.precision not in dtypes:
            raise ValueError(f"{self.name}: precision {cell.precision!r} has no compute dtype; known: {', '.join(dtypes)}")
        topo = cell.topology
        argv = torchrun_prefix(trial, node_rank, nodes, settings) + [
            str(settings.get("script_path") or SCRIPT),
            "-m", str(settings["model_family"]), "-mr", str(settings["recipe"]), "-g", str(settings["gpu"]),
            "-c", dtypes[cell.precision], "--task", "pretrain", "--data", "mock",
            "-ng", str(topo.world_size), "-gn", str(topo.gpus_per_node),
            "-tp", str(lay.mp), "-pp", str(lay.pp), "-cp", str(lay.cp),
            "-mb", str(lay.micro_batch), "-gb", str(lay.global_batch), "-sl", str(lay.seq_length),
            "-ms", str(cell.window.total),
        ]
        if lay.vp > 1:
            argv += ["-vp", str(lay.vp)]
        argv += [str(a) for a in settings.get("extra_args") or []]
        return LaunchSpec(argv=argv, env=node_env(node_rank, nodes, settings), workdir=settings.get("workdir"))
