"""torchtitan Llama 3 pretraining: ``torchrun ... -m torchtitan.train --module llama3 --config <name>``.

The CLI is the pinned commit's (``torchtitan/config/manager.py``: ``--module`` and ``--config``
pick a config_registry function, then ``--<section>.<field>`` overrides, unknown ones refused;
``run_train.sh`` launches it the same way). The cell's layout gives the parallel degrees
(``--parallelism.tensor_parallel_degree`` / ``context_parallel_degree`` /
``pipeline_parallel_degree``; FSDP takes the rest, ``data_parallel_shard_degree -1``); a layout
whose group is ``compile`` adds ``--compile.enable``. Precision: the config name per precision
(launcher ``configs``), since at the pinned commit Float8 is switched on by the registry function
(its model converters), not by a CLI flag.

Launcher settings: ``configs`` (precision -> config_registry name, e.g. bf16: llama3_8b),
``module`` (default llama3), ``hf_assets_path``, ``workdir``, ``python``, ``master_port``,
``extra_args``.
"""

from __future__ import annotations

from typing import Mapping

from dlperf_tasks.core.model import Trial
from dlperf_tasks.frameworks._torchtitan_log import TorchtitanStream
from dlperf_tasks.frameworks._llm import LlmFramework, node_env, torchrun_prefix
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

ENTRY = "torchtitan.train"
#: layout groups that switch on torch.compile
COMPILED_GROUPS = ("compile", "tp2", "cp2")


class TorchtitanLlama(LlmFramework):
    name = "torchtitan_llama"
    log_framework = "torchtitan"
    log_model = "llama3"
    log_prefix = "torchtitan"
    llm_name = "torchtitan"
    Stream = TorchtitanStream  # samples: tps, tokens/s per device

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell, lay = trial.cell, trial.cell.layout
        if lay is None:
            raise ValueError(f"{self.name}: cell {cell.id} has no layout (the suite's layouts give the parallel degrees)")
        configs = dict(settings.get("configs") or {})
        if cell.precision not in configs:
            raise ValueError(f"{self.name}: no config_registry name for precision {cell.precision!r} "
                             f"(launcher.configs has {', '.join(configs) or 'none'})")
        argv = torchrun_prefix(trial, node_rank, nodes, settings) + [
            "-m", ENTRY, "--module", str(settings.get("module", "llama3")), "--config", str(configs[cell.precision]),
            "--training.steps", str(cell.window.total),
            "--training.max_context_length", str(lay.seq_length),
            "--training.num_tokens_per_microbatch_per_dp_rank", str(lay.micro_batch * lay.seq_length),
            "--parallelism.data_parallel_shard_degree", "-1",
            "--parallelism.tensor_parallel_degree", str(lay.mp),
            "--parallelism.context_parallel_degree", str(lay.cp),
            "--parallelism.pipeline_parallel_degree", str(lay.pp),
        ]
        if lay.group in COMPILED_GROUPS:
            argv.append("--compile.enable")
        if settings.get("hf_assets_path"):
            argv += ["--hf_assets_path", str(settings["hf_assets_path"])]
        argv += [str(a) for a in settings.get("extra_args") or []]
        return LaunchSpec(argv=argv, env=node_env(node_rank, nodes, settings), workdir=settings.get("workdir"))
