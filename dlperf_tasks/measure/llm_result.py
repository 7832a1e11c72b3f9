"""The LLM figures of one trial, put beside its metric: what the validity gate adds for a
framework that names ``llm_name`` (``frameworks/_llm.py``).

``metric.details["llm"]``: ``figures`` (``llm_metrics.llm_figures``: tokens/s/GPU, TFLOP/s/GPU in
both attention conventions, MFU with the peak used or the reason it is refused, step time, memory,
energy per token; the GPU model is the one nvidia-smi named on the trial's nodes, from the
environment capture), ``checks`` (``llm_checks.run_checks``), ``reference`` (the published band or why
none matches) and the cell facts they were computed from. A failed run check adds a flag the
report shows; it does not change the metric.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlperf_tasks.core.model import Cell, ParsedLog, TrialMetric, Window
from dlperf_tasks.measure.llm_checks import failed, reference_band, run_checks
from dlperf_tasks.measure.llm_metrics import llm_figures, resolve_gpu, trial_gpu


def cell_facts(cell: Cell, framework: str, gpu: str | None = None, gpu_reason: str | None = None) -> dict:
    """What the cell states, as ``llm_figures`` and ``reference_band`` read it (``gpu``: the model
    the trial's nodes reported, ``gpu_reason``: why there is none)."""
    lay = cell.layout
    layout = ({"tp": lay.mp, "pp": lay.pp, "cp": lay.cp, "vp": lay.vp, "dp": lay.dp, "fsdp": lay.dp,
               "global_batch": lay.global_batch, "micro_batch": lay.micro_batch, "seq_length": lay.seq_length}
              if lay is not None else {})
    return {"framework": framework, "model": cell.model, "precision": cell.precision, "gpu": gpu,
            **({"gpu_reason": gpu_reason} if gpu is None and gpu_reason else {}),
            "world_size": cell.topology.world_size, "nodes": cell.topology.nodes,
            "global_batch": lay.global_batch if lay is not None else None,
            "seq_length": lay.seq_length if lay is not None else None, "layout": layout}


def attach(llm_name: str, cell: Cell, parsed: ParsedLog, window: Window, metric: TrialMetric,
           gpu_models: Mapping[str, str | None] | None = None) -> None:
    """Add the LLM figures, run checks and reference band to ``metric.details`` (in place).
    ``gpu_models``: ``{node: nvidia-smi name}`` of the trial's nodes (None: not known here)."""
    name, why = trial_gpu(gpu_models or {})
    key = resolve_gpu(name)[0] if name else None  # the peak table's key, as the references name GPUs
    facts = cell_facts(cell, llm_name, key or name, why)
    if name:
        facts["gpu_name"] = name
    figures = llm_figures(parsed, llm_name, facts, window)
    checks = run_checks(parsed, window, cell.window.total)
    metric.details["llm"] = {"cell": facts, "figures": figures, "checks": checks,
                             "reference": reference_band(facts, figures)}
    flags = [f"run check: {line}" for line in failed(checks)]
    if flags:
        metric.details["flags"] = list(metric.details.get("flags") or []) + flags
