"""Which parser reads which LLM log format, and tokens/s per GPU from a parsed log and its cell.

For a framework module (``LlmFramework`` subclasses): ``Stream = stream_class("torchtitan")`` (or
``"megatron"``, ``"nemo2"``) wires the parser; :func:`tokens_per_gpu_samples` turns a parsed log into
one tokens/s-per-GPU value per logged step:

* torchtitan: its ``tps`` as printed (already per device);
* Megatron-LM / Megatron-Bridge, NeMo 2: global batch x sequence length / step time / world size,
  the global batch from the log where it prints it, else the cell's layout; the sequence length
  and world size from the cell (layout, topology). A fact neither gives: ``ValueError`` naming it
  (nothing is guessed).
"""

from __future__ import annotations

from dlperf_tasks.core.model import Cell, ParsedLog
from dlperf_tasks.frameworks._megatron_llm_log import MegatronLlmStream
from dlperf_tasks.frameworks._nemo2_log import Nemo2Stream
from dlperf_tasks.frameworks._torchtitan_log import UNIT as TORCHTITAN_UNIT
from dlperf_tasks.frameworks._torchtitan_log import TorchtitanStream

STREAMS = {"torchtitan": TorchtitanStream, "megatron": MegatronLlmStream, "nemo2": Nemo2Stream}


def stream_class(log_format: str) -> type:
    try:
        return STREAMS[log_format]
    except KeyError:
        raise KeyError(f"unknown LLM log format {log_format!r}; known: {', '.join(STREAMS)}") from None


def tokens_per_gpu_samples(parsed: ParsedLog, cell: Cell) -> dict[int, float]:
    """{step: tokens/s per GPU} (see the module docstring)."""
    if any(s.unit == TORCHTITAN_UNIT for s in parsed.samples):
        return {s.iteration: s.value for s in parsed.samples}
    lay = cell.layout
    gbs = parsed.extra.get("global_batch_size") or (lay.global_batch if lay is not None else None)
    seq = lay.seq_length if lay is not None else None
    world = cell.topology.world_size
    missing = [n for n, v in (("global batch", gbs), ("sequence length", seq), ("world size", world)) if not v]
    if missing:
        raise ValueError(f"cell {cell.id}: neither the log nor the cell gives the {', '.join(missing)}: "
                         "no tokens/s per GPU")
    return {s.iteration: gbs * seq / (s.value / 1000.0) / world for s in parsed.samples if s.value > 0}
