"""What the log says it trained, against the cell (part of the validity gate).

A log that prints its own arguments names the model it trained: gluon-cv's and gluon-nlp's
``Namespace(... model='resnet50_v1b' ...)``, DLE PyTorch BERT's ``PARAMETER Config`` line
(``bert_model``, ``config_file``), TensorFlow BERT's ``--bert_config_file`` (the checkpoint
directory names the size: ``uncased_L-12_H-768_A-12``); Megatron's arguments block gives the layer,
hidden and head counts (checked against the cell's layout by the framework itself). Only what the
log prints is compared; a log that prints none of it is judged as before. A value that names no
model this module can place (a plain ``bert_config.json``) is not compared either.

A non-finite gradient norm inside the window (Megatron prints ``grad norm: nan`` and then omits
``lm loss``; its ``number of nan iterations`` may still say 0) means the steps trained nothing:
the trial is invalid. A parser records such iterations in ``ParsedLog.extra["nonfinite_grad_norms"]``.

Pure logic, no I/O.
"""

from __future__ import annotations

from typing import Iterable

from dlperf_tasks.frameworks.modelnames import model_kind

#: the argument names (as the parsers keep them in ``LogFacts.args``) that name the model trained
MODEL_ARGS = ("model", "bert_model", "config_file", "bert_config_file")


def model_problems(cell_model: str, args: dict, source: str = "") -> list[str]:
    """Where the model the log's arguments name differs from the cell's model."""
    want = model_kind(cell_model)
    if want is None:
        return []
    out = []
    for key in MODEL_ARGS:
        value = args.get(key)
        got = model_kind(value) if value is not None else None
        if got is not None and got != want:
            where = f" ({source})" if source else ""
            out.append(f"log trained another model: its {key} is {str(value).strip()[:80]!r}{where}, "
                       f"the cell's model is {cell_model!r}")
    return out


def grad_norm_problems(iterations: Iterable[int], warmup: int, total: int) -> list[str]:
    """A reason when a non-finite gradient norm was logged for an iteration inside the window."""
    if not iterations:  # the usual case: none was logged
        return []
    inside = sorted({int(i) for i in iterations if warmup < int(i) <= total})
    if not inside:
        return []
    shown = ", ".join(str(i) for i in inside[:5]) + (f" (+{len(inside) - 5} more)" if len(inside) > 5 else "")
    return [f"non-finite grad norm at iteration(s) {shown} inside the window: those steps trained nothing"]
