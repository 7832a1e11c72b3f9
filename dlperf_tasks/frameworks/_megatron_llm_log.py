"""Megatron-LM / Megatron-Bridge iteration lines of 2024-2026, on top of ``megatron_gpt``'s parser.

``megatron_gpt.MegatronStream`` already reads the iteration line (elapsed ms, ``lm loss``, ``grad
norm``, ``throughput per GPU (TFLOP/s/GPU)``, skipped and nan iteration counts, global batch size),
the ``[Rank N] (after N iterations) memory (MB) | ...`` report and the arguments block. This stream
adds what newer logs print (NVIDIA/Megatron-LM ``megatron/training/training.py`` ``training_log``;
Megatron-Bridge's ``training/utils/train_utils.py`` prints the same spelling)::

     [2026-02-06 20:55:02.918469] iteration 292/95367431 | consumed samples: 9344 | elapsed time per
     iteration (ms): 3075.7 | throughput per GPU (TFLOP/s/GPU): 478.0 | energy per GPU (J/iter/GPU):
     1992.5 | power per GPU (W/GPU): 647.8 | ... | lm loss: 2.401035E-02 | loss scale: 1.0 | grad norm: 1.797 |

(one line): the ``[date time]`` prefix with or without microseconds (2024 logs print seconds only),
``energy per GPU (J/iter/GPU)`` and ``power per GPU (W/GPU)`` (``--log-energy``).

Use: ``MegatronLlmStream().feed(text)`` ... ``.close()`` or :func:`parse_lines`. Samples as
``megatron_gpt`` (``value`` = elapsed ms per iteration). ``extra`` adds ``energy_j_per_gpu`` and
``power_w_per_gpu`` {iteration: value}, ``timestamps`` {iteration: ISO text} and, from Megatron-Bridge's
memory report ``[Rank 0] (after N iterations) memory (GB) | mem-allocated-gigabytes: X | ... |
mem-max-reserved-gigabytes: X | mem-alloc-retires: 0 | mem-allocated-count: N`` (NVIDIA-NeMo/Megatron-Bridge@067f987
``training/utils/train_utils.py``: ``report_memory`` renames ``MEMORY_KEYS``' ``*-bytes`` to ``*-gigabytes``,
bytes / 1e9 to 5 significant digits; the counts keep their names), ``memory_gb`` {gigabytes field: largest
over the report lines} and ``memory_mib`` (``mem-max-reserved-gigabytes``: the allocator's peak reserved); the base parser's
``tflops_per_gpu``, ``skipped_iterations``, ``nonfinite_grad_norms``, ``memory_mb`` stay.

A record must be whole: Megatron closes every field with ``|``, so an iteration line that does not
end with ``|`` (cut short or wrapped onto the next line) and a line holding two ``iteration N/M``
records (glued) are refused in ``facts.errors`` by line number before the base parser reads them.
"""

from __future__ import annotations

import re

from dlperf_tasks.core.model import ParsedLog
from dlperf_tasks.frameworks._lines import parse_float
from dlperf_tasks.frameworks._stream import parse_with
from dlperf_tasks.frameworks.megatron_gpt import MegatronStream

_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d{1,6})?)\]\s*iteration\s")
_ITER_NO = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")
_ENERGY = re.compile(r"energy per GPU \(J/iter/GPU\)\s*:\s*([^\s|]+)\s*\|")
_POWER = re.compile(r"power per GPU \(W/GPU\)\s*:\s*([^\s|]+)\s*\|")
_MEM_GB = re.compile(r"\[Rank (\d+)\]\s*\(after (\d+) iterations\)\s*memory \(GB\)")
_GB_FIELD = re.compile(r"\|\s*([A-Za-z][\w.-]*)\s*:\s*([^\s|]+)")
#: the report's name of the allocator's peak reserved memory (``reserved_bytes.all.peak`` in MEMORY_KEYS)
PEAK_RESERVED = "mem-max-reserved-gigabytes"


class MegatronLlmStream(MegatronStream):
    """Megatron-LM / Megatron-Bridge log with the 2024-2026 fields (see the module docstring)."""

    def __init__(self, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        self.extra["energy_j_per_gpu"] = {}
        self.extra["power_w_per_gpu"] = {}
        self.extra["timestamps"] = {}

    def scan(self, block: str) -> None:
        super().scan(block)
        if "memory (GB)" in block:
            for start, line in self.lines_with(block, "memory (GB)"):
                self._memory_gb(block, start, line)

    def _memory_gb(self, block: str, start: int, text: str) -> None:
        """Megatron-Bridge's report: ``[Rank 0] (after 10 iterations) memory (GB) | mem-max-reserved-gigabytes:
        61.2 | ...`` (torch.cuda.memory_stats bytes / 1e9); the count fields are not memory and are skipped."""
        if not _MEM_GB.search(text):
            return
        gb = self.extra.setdefault("memory_gb", {})
        for name, value in _GB_FIELD.findall(text):
            if not name.endswith("gigabytes"):
                continue
            v = parse_float(value)
            if v is None or v < 0:
                self.fc.error(f"line {self.line_no(block, start)}: memory field {name!r} is {value!r}, not a number")
                continue
            gb[name] = max(gb.get(name, 0.0), v)
        if PEAK_RESERVED in gb:
            self.extra["memory_mib"] = round(gb[PEAK_RESERVED] * 1e9 / 2**20, 2)

    def _iteration(self, block: str, start: int, text: str) -> None:
        line = text.rstrip()
        if len(_ITER_NO.findall(line)) > 1:
            self.fc.error(f"line {self.line_no(block, start)}: two Megatron iteration records glued on one line; "
                          "refused")
            return
        if not line.endswith("|"):
            self.fc.error(f"line {self.line_no(block, start)}: Megatron iteration record does not end with '|' "
                          f"(cut short or wrapped); refused: {line[-120:]!r}")
            return
        before = len(self.samples)
        super()._iteration(block, start, text)
        if len(self.samples) == before:
            return
        it = _ITER_NO.search(line)
        if it is None:
            return
        n = int(it.group(1))
        for rx, key, label in ((_ENERGY, "energy_j_per_gpu", "energy per GPU"),
                               (_POWER, "power_w_per_gpu", "power per GPU")):
            m = rx.search(line)
            if m:
                v = parse_float(m.group(1))
                if v is None or v < 0:
                    self.fc.error(f"line {self.line_no(block, start)}: iteration {n}: {label} {m.group(1)!r} "
                                  "is not a non-negative number")
                else:
                    self.extra[key][n] = v
        st = _STAMP.search(line)
        if st:
            self.extra["timestamps"][n] = st.group(1)


def parse_lines(lines) -> ParsedLog:
    """Parse an iterable of lines (or pieces of a log) as a Megatron-LM / Megatron-Bridge log."""
    return parse_with(MegatronLlmStream(), lines)
