"""NeMo 2 (nemo.lightning, Megatron progress bar) step lines, read incrementally.

One record a step, after any prefix (``[2025-11-20T14:55:23+08:00] retraining/0 ``)::

    Training epoch 0, iteration 74/99 | lr: 1.124e-05 | global_batch_size: 128 | global_step: 74 |
    max_memory_reserved: 64286097408 | max_memory_allocated: 62777982976 | reduced_train_loss: 11.87 |
    train_step_timing in s: 8.768 | TFLOPS_per_GPU: 865.7 | consumed_samples: 9600

(one line in the log). Fields are ``name: value`` pairs between ``|``; numbers may be in scientific
notation (``tokens_per_sec_per_gpu: 1.073e+04``, ``TFLOPS_per_GPU: 8.657e+02``). The first step of a
run has no ``consumed_samples``; that field is not required.

Use: ``Nemo2Stream().feed(text)`` ... ``.close()`` or :func:`parse_lines`. Each sample:
``iteration`` = the ``iteration N/M`` counter, ``value`` = ``train_step_timing in s`` x 1000 (``unit``
"ms/iter"), ``memory_mib`` = ``max_memory_reserved`` bytes / 2**20 where printed, ``loss`` =
``reduced_train_loss``. ``extra``: ``tflops_per_gpu`` and ``tokens_per_sec_per_gpu`` {iteration:
value} where printed, ``global_batch_size`` (the last printed), ``train_iters`` (M).

A record must be whole: the line must hold ``train_step_timing in s: X`` followed by ``|`` or the end
of the line, and exactly one ``Training epoch``; a record cut short, wrapped or glued to other text is
refused in ``facts.errors`` by line number. A field whose value is not a number is refused by name.
"""

from __future__ import annotations

import re

from dlperf_tasks.core.model import ParsedLog, Sample
from dlperf_tasks.frameworks._stream import LogStream, as_float, parse_with

_HEAD = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)\s*(?:\||$)")
_FIELD = re.compile(r"\|\s*([A-Za-z_][A-Za-z0-9_ ]*?):\s*([^|\s]+)\s*(?=\||$)")
_STEP_TIME = "train_step_timing in s"
UNIT = "ms/iter"


class Nemo2Stream(LogStream):
    """NeMo 2 training log: one sample a logged step (see the module docstring)."""

    def __init__(self, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        self.extra["tflops_per_gpu"] = {}
        self.extra["tokens_per_sec_per_gpu"] = {}

    def scan(self, block: str) -> None:
        if "Training epoch" not in block:
            return
        for start, line in self.lines_with(block, "Training epoch"):
            self._record(block, start, line.rstrip())

    def _record(self, block: str, start: int, line: str) -> None:
        where = f"line {self.line_no(block, start)}"
        if line.count("Training epoch") > 1:
            self.fc.error(f"{where}: two NeMo step records glued on one line; refused")
            return
        at = line.find("Training epoch")
        head = _HEAD.match(line, at)
        if not head:
            self.fc.error(f"{where}: NeMo step record cut short: {line[at:at + 120]!r}")
            return
        fields = dict((k.strip(), v) for k, v in _FIELD.findall(line, head.end() - 1))
        if _STEP_TIME not in fields:
            self.fc.error(f"{where}: NeMo step record without a whole '{_STEP_TIME}: X' field (cut short, "
                          "wrapped or glued); refused")
            return
        it = int(head.group(2))
        secs = as_float(fields[_STEP_TIME])
        if secs is None or not secs > 0 or secs == float("inf"):
            self.fc.error(f"{where}: iteration {it}: '{_STEP_TIME}' is {fields[_STEP_TIME]!r}, not a positive "
                          "finite number")
            return
        for name, key in (("TFLOPS_per_GPU", "tflops_per_gpu"), ("tokens_per_sec_per_gpu", "tokens_per_sec_per_gpu")):
            if name in fields:
                v = as_float(fields[name])
                if v is None:
                    self.fc.error(f"{where}: iteration {it}: {name} is {fields[name]!r}, not a number")
                else:
                    self.extra[key][it] = v
        gbs = as_float(fields.get("global_batch_size"))
        if gbs:
            self.extra["global_batch_size"] = int(gbs)
        self.extra["train_iters"] = int(head.group(3))
        mem = as_float(fields.get("max_memory_reserved"))
        loss = None
        if "reduced_train_loss" in fields:
            loss = self.loss(it, "reduced_train_loss", fields["reduced_train_loss"])
            self.fc.facts.final_loss = loss
        self.add(Sample(iteration=it, value=round(secs * 1000.0, 4), unit=UNIT, rank=None,
                        memory_mib=round(mem / 2**20, 2) if mem else None, loss=loss))


def parse_lines(lines) -> ParsedLog:
    """Parse an iterable of lines (or pieces of a log) as a NeMo 2 log."""
    return parse_with(Nemo2Stream(), lines)
