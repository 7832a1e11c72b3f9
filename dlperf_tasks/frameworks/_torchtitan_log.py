"""torchtitan's step lines (pytorch/torchtitan ``components/metrics.py``), read incrementally.

One record a logged step, after any logger prefix (``[rank0]:[titan] 2026-05-18 16:04:46,338 - root -
INFO - ``) and with or without ANSI colour codes::

    step: 14  loss:  3.24405  grad_norm:  0.8319  memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%

``grad_norm`` and ``tflops`` are optional (2025 releases print no grad_norm); ``mfu`` ends every
record (``mfu: N/A`` on a device without a known peak), so a record cut anywhere before it is seen. ``tps`` is tokens per second **per
device** (thousands separators allowed). Validation records (``validate step: N  loss: ...  memory: ...
tps: N``, pytorch/torchtitan@b5bcd76 ``components/metrics.py`` ``log_validation``) are not training steps and
are skipped; ``memory`` is the caching allocator's max reserved GiB and
its share of the device.

Use: ``TorchtitanStream().feed(text)`` ... ``.close()`` -> ParsedLog, or :func:`parse_lines`.
Each sample: ``iteration`` = step, ``value`` = tps (``unit`` "tokens/s/gpu"), ``memory_mib`` =
memory GiB x 1024, ``loss``. ``extra``: ``tflops_per_gpu`` {step: printed tflops},
``mfu_pct`` {step: printed mfu or None for N/A}, ``memory_pct`` {step: %}, ``grad_norm`` {step:
value}, ``nonfinite_grad_norms`` [steps]. The same step printed by several ranks is kept once.

A record must be whole: a line holding ``step:`` that does not read as one whole record from
``step:`` to the end of the line (cut short, wrapped onto the next line, or glued to more text) is
refused in ``facts.errors`` by its line number, never half-read. Time is linear in the log, memory
bounded by the samples kept.
"""

from __future__ import annotations

import math
import re

from dlperf_tasks.core.model import ParsedLog, Sample
from dlperf_tasks.frameworks._stream import LogStream, parse_with

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: a number with thousands separators only in groups of three ("10,050", never "10,0")
_GROUPED = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUM = r"[-+]?(?:\d[\d,]*(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf|-inf)"
_RECORD = re.compile(
    r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>" + _NUM + r")"
    r"(?:\s+grad_norm:\s*(?P<gn>" + _NUM + r"))?"
    r"\s+memory:\s*(?P<gib>\d+(?:\.\d+)?)GiB\((?P<pct>\d+(?:\.\d+)?)%\)"
    r"\s+tps:\s*(?P<tps>" + _GROUPED + r")"
    r"(?:\s+tflops:\s*(?P<tflops>" + _GROUPED + r"))?"
    r"\s+mfu:\s*(?:(?P<mfu>\d+(?:\.\d+)?)%|(?P<na>N/A))\s*$")
UNIT = "tokens/s/gpu"


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


class TorchtitanStream(LogStream):
    """torchtitan training log: one sample a logged step (see the module docstring)."""

    def __init__(self, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        for key in ("tflops_per_gpu", "mfu_pct", "memory_pct", "grad_norm"):
            self.extra[key] = {}
        self._seen: set[int] = set()

    def scan(self, block: str) -> None:
        if "step:" not in block:
            return
        for start, line in self.lines_with(block, "step:"):
            self._record(block, start, line)

    def _record(self, block: str, start: int, line: str) -> None:
        text = _ANSI.sub("", line) if "\x1b" in line else line
        at = text.find("step:")
        if "loss:" not in text[at:]:
            return  # prose ("Dumping profiler traces at step 200" has no "step:" record)
        if text[:at].rstrip().endswith("validate"):
            return  # a validation record ("validate step: N  loss: ...  tps: N"): not a training step
        if text.count("step:") > 1:
            self.fc.error(f"line {self.line_no(block, start)}: two torchtitan step records glued on one line; "
                          "refused")
            return
        m = _RECORD.match(text, at)
        if not m:
            self.fc.error(f"line {self.line_no(block, start)}: torchtitan step record cut short, wrapped or "
                          f"glued to other text: {text[at:at + 160]!r}")
            return
        step = int(m.group("step"))
        if step in self._seen:  # every rank prints the same step
            return
        self._seen.add(step)
        loss = self.loss(step, "loss", m.group("loss"))
        gn = _num(m.group("gn"))
        if m.group("gn") is not None:
            self.extra["grad_norm"][step] = gn
            if gn is None or not math.isfinite(gn):
                self.extra.setdefault("nonfinite_grad_norms", []).append(step)
        gib = float(m.group("gib"))
        self.extra["memory_pct"][step] = float(m.group("pct"))
        if m.group("tflops") is not None:
            self.extra["tflops_per_gpu"][step] = _num(m.group("tflops"))
        if m.group("mfu") is not None or m.group("na"):
            self.extra["mfu_pct"][step] = _num(m.group("mfu"))
        self.add(Sample(iteration=step, value=_num(m.group("tps")), unit=UNIT,
                        rank=self.rank_at(block, start), memory_mib=round(gib * 1024.0, 2), loss=loss))


def parse_lines(lines) -> ParsedLog:
    """Parse an iterable of lines (or pieces of a log) as a torchtitan log."""
    return parse_with(TorchtitanStream(), lines)
