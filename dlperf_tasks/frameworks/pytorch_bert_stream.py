"""The log stream of NGC PyTorch BERT (DLE ``run_pretraining.py``): see :mod:`.pytorch_bert` for the format.

The bulk of a block (its step lines all well formed, one date, steps increasing, plain finite losses) is
read by the compiled ``_cdll`` in one pass (:mod:`._native`); everything else (and a machine without a
C compiler) takes the pure-Python path, which is the reference: same results.
"""

from __future__ import annotations

import datetime as _dt
import math
import operator
import re

from dlperf_tasks.frameworks import _native
from dlperf_tasks.frameworks._lines import _CRASH_HINTS, clock_seconds
from dlperf_tasks.frameworks._stream import LogStream, as_float, as_int, kv_args, kv_pattern, literals_in
from dlperf_tasks.core.model import Sample

#: DLPerf skips steps 1..SKIP_STEPS
SKIP_STEPS = 5


def _stride(facts) -> int:
    """Steps between two logged step lines (DLE ``log_freq``; 1 when the log does not say)."""
    return max(int(facts.stride or 1), 1)


class PytorchBertStream(LogStream):
    """DLE ``run_pretraining.py`` log: DLL step lines, the Config/PARAMETER lines, the final summary.

    A step number logged again right after itself with a later timestamp is an optimizer step that AMP
    skipped for a loss-scale overflow (DLE logs ``global_step``, which a skipped step does not advance;
    seed 001's fp16 logs print ``Training Iteration: 0`` five times): the micro-batches were computed, so
    it counts as one more step of work. Samples are numbered by steps done (the log's step + the skips
    so far, in ``stride`` units); :attr:`LogFacts.skipped_steps` counts them. A step number going back
    after progress, or a second ``PARAMETER Config`` banner, is a restarted or concatenated log: the
    numbers repeat (the gate refuses them) or the banner is an error.

    Newer DLE (e.g. PaddlePaddle/Perf's 2023 logs) prints a running ``skipped_steps : N`` on every step line
    and may log a lower step number while it skips: there every step line is one optimizer step of work and
    samples are numbered by line (first step + lines so far x stride); ``skipped_steps`` is the last count."""

    _ordinal = False  # the log prints skipped_steps: number samples by step line
    _first_step: int | None = None
    _lines_seen = 0
    _last_step: int | None = None  # the log's own step number of the last step line
    _last_ts: float = -math.inf
    _offset = 0  # skipped steps so far, in iteration units
    _banners = 0

    def scan(self, block: str) -> str:
        scan = _native.dll_scan
        fast = scan(block) if scan is not None and not self._ordinal else None
        # the rest (the block less the step lines) for PyTorch's literals and the crash hints: the
        # removed step lines hold none of them, and a literal across a removed line only costs a look
        which = _native.literals or literals_in
        found = which(fast[0], _SCAN_LITERALS) if fast is not None and fast[0].isascii() else None
        if found is None or (fast[2] and (found & 1 or (
                self._last_step is not None and fast[2][0] <= self._last_step))):
            fast = None  # ordinal numbering, or a repeated/backward step across blocks: the Python path
        if fast is not None:
            rest = self._scan_fast(block, found, *fast)
            self.rest_hints = found >> len(_LITERALS)  # the crash hints in ``rest``, for _crash_scan
            return rest
        parts = _DLL_FAST.split(block)  # [text, 10 groups, text, 10 groups, ...]: columns at C speed
        n = (len(parts) - 1) // 11
        if n and not self._ordinal and "skipped_steps : " in block:
            self._ordinal = True
        if n and (self._ordinal or not self._bulk(parts)):  # rows (tuples) only when the columns need a closer look
            self._steps(list(zip(*(parts[i::11] for i in range(1, 11)))))
        if n != block.count("Training Epoch: "):
            self._slow(block)
        if self._ordinal:
            counts = _SKIPPED.findall(block)
            if counts:
                self.fc.facts.skipped_steps = int(counts[-1])
        self._other_lines(block)
        # the crash-marker scan reads the rest; tqdm's bars stay in it: cutting them out (a regex
        # ``sub``) cost more than the ``find`` passes over them (they hold no crash hint)
        return "".join(parts[0::11]) if n else block

    def _scan_fast(self, block: str, found: int, rest: str, epochs: int, raw: list, ts: list, losses: list) -> str:
        """:meth:`scan` with the step lines read by ``_cdll`` (the bulk case of :meth:`_bulk`) and the
        literals of :data:`_LITERALS` found in one pass (``found``: bit i for ``_LITERALS[i]``)."""
        n = len(raw)
        if n and not self._bulk_columns(raw, ts, losses):
            self._steps(list(zip(*(_DLL_FAST.split(block)[i::11] for i in range(1, 11)))))
        if n != epochs:
            self._slow(block)
        self._other_lines(block, found)
        return rest

    def _other_lines(self, block: str, found: int | None = None) -> None:
        """The Config/PARAMETER lines, DLE's summary, the launcher's command line (``found``: which of
        :data:`_LITERALS` occur, None: look)."""
        for bit, literal, read in ((2, "PARAMETER", self._parameter),
                                   (4, "training_sequences_per_second", self._summary),
                                   (8, "torch.distributed.launch", self._launcher), (16, "torchrun", self._launcher)):
            if (found & bit) if found is not None else literal in block:
                for line in self.lines_holding(block, literal):
                    read(line)

    def _summary(self, line: str) -> None:
        m = _SUMMARY.search(line)
        v = as_float(m.group(1)) if m else None
        if v is not None:
            self.fc.facts.framework_figure = v
            self.fc.facts.framework_figure_name = "DLE training_sequences_per_second"
        fm = _FINAL_LOSS.search(line)
        if fm:
            self.fc.facts.final_loss = self.loss(self.max_iteration or 0, "final_loss", fm.group(1))

    def _bulk(self, parts: list[str]) -> bool:
        """All step lines of the block on one date with a numeric loss: whole columns through
        ``map`` (C speed). False: let :meth:`_steps` go row by row (and name what is wrong)."""
        ys, mos, ds, losses_s = parts[1::11], parts[2::11], parts[3::11], parts[10::11]
        n = len(ys)
        if ys.count(ys[0]) != n or mos.count(mos[0]) != n or ds.count(ds[0]) != n or None in losses_s:
            return False  # several dates, a line without a loss: row by row
        try:
            day = _day_seconds(ys[0], mos[0], ds[0])
            raw = list(map(int, parts[8::11]))
            if (self._last_step is not None and raw[0] <= self._last_step) or not all(
                    map(operator.lt, raw, raw[1:])):  # ints: strictly increasing, compared at C speed
                return False  # a repeated or backward step: row by row (skipped step or restart)
            losses = list(map(float, losses_s))
            ts = clock_seconds(day, parts[4::11], parts[5::11], parts[6::11])
        except ValueError:
            return False
        return self._bulk_columns(raw, ts, losses)

    def _bulk_columns(self, raw: list[int], ts: list[float], losses: list[float]) -> bool:
        """Add the block's columns (steps strictly increasing, after :attr:`_last_step`); False when a
        loss is not finite (their sum tells: row by row then)."""
        if not -math.inf < sum(losses) < math.inf:
            return False
        off = self._offset
        steps = [s + off for s in raw] if off else raw
        n = len(raw)
        self.samples.add_columns(steps, ts, "s", rank=[0] * n, timestamp=ts, loss=losses)
        self._last_step, self._last_ts = raw[-1], ts[-1]
        self.fc._iters.update(steps)
        self.fc._ranks.add(0)
        self.fc.facts.final_loss = losses[-1]
        top = max(steps)
        if self.max_iteration is None or top > self.max_iteration:
            self.max_iteration = top
        return True

    def _steps(self, rows: list[tuple]) -> None:
        """One Sample per DLL step line (timestamp in seconds; the first loss the line prints)."""
        samples, iters = self.samples, self.fc._iters
        top = self.max_iteration if self.max_iteration is not None else -1
        days: dict[tuple[str, str, str], float] = {}  # the block's dates, each computed once
        for y, mo, d, h, mi, secs, _epoch, step_s, name, loss_s in rows:
            day = days.get((y, mo, d))
            if day is None:
                try:
                    day = days[(y, mo, d)] = _day_seconds(y, mo, d)
                except ValueError:
                    self.fc.error(f"invalid date {y}-{mo}-{d} in a DLL line")
                    continue
            ts = day + int(h) * 3600 + int(mi) * 60 + float(secs)
            raw = int(step_s)
            if self._ordinal:  # one step line = one optimizer step of work, whatever number it prints
                if self._first_step is None:
                    self._first_step = raw
                raw = self._first_step + self._lines_seen * _stride(self.fc.facts)
                self._lines_seen += 1
            elif raw == self._last_step and ts > self._last_ts:  # an overflow-skipped optimizer step
                self._offset += _stride(self.fc.facts)
                self.fc.facts.skipped_steps += 1
            self._last_step, self._last_ts = raw, ts
            step = raw + self._offset
            loss = None
            if name:
                loss = float(loss_s) if _NUM.match(loss_s) else self.loss(step, name, loss_s)
                self.fc.facts.final_loss = loss  # the last loss printed (final_loss at the last step)
            samples.append(Sample(step, ts, "s", 0, ts, None, loss))
            iters.add(step)
            if step > top:
                top = step
        self.fc._ranks.add(0)
        if top >= 0:
            self.max_iteration = top

    def _slow(self, block: str) -> None:
        """Lines with 'Training Epoch: ' that the fast regex did not read: parse errors."""
        for start, line in self.lines_with(block, "Training Epoch: "):
            if not _DLL_FAST.search(line):
                self.fc.error(f"line {self.line_no(block, start)}: 'Training Epoch:' line without a readable "
                              f"DLL timestamp/step: {line[:120]!r}")

    def _parameter(self, line: str) -> None:
        f = self.fc.facts
        if "Config" in line and "Namespace(" in line:
            self._banners += 1
            if self._banners == 2:
                self.fc.error("a second 'PARAMETER Config' start-up banner: a restarted or concatenated log "
                              "(rerun the trial)")
            args = kv_args(line[line.index("Namespace("):], _CONFIG_KEYS)
            f.args.update(args)
            f.args_source = "DLE PARAMETER Config line"
            # DLE logs Config after setup_training() divided train_batch_size by the accumulation
            f.batch_per_device = as_int(args.get("train_batch_size"))
            f.accumulation = as_int(args.get("gradient_accumulation_steps"))
            freq = as_int(args.get("log_freq"))
            if freq:
                f.stride = freq
        m = _BATCH_PER_GPU.search(line) if f.batch_per_device is None else None
        if m:
            f.batch_per_device = int(m.group(1))
            f.args_source = f.args_source or "DLE PARAMETER batch_size_per_gpu line"

    def _launcher(self, line: str) -> None:
        nproc, nnodes = _NPROC.search(line), _NNODES.search(line)
        if nproc:
            self.fc.facts.world_size = int(nproc.group(1)) * (int(nnodes.group(1)) if nnodes else 1)
            self.fc.facts.args["launcher"] = "torch.distributed.launch"


#: the literals :meth:`PytorchBertStream.scan` looks for, in one pass (bit i: ``_LITERALS[i]``)
_LITERALS = ("skipped_steps : ", "PARAMETER", "training_sequences_per_second", "torch.distributed.launch", "torchrun")
_SCAN_LITERALS = _LITERALS + _CRASH_HINTS


_CONFIG_KEYS = kv_pattern("train_batch_size", "gradient_accumulation_steps", "log_freq", "max_steps", "bert_model",
                          "config_file", "fp16", "amp")
_DLL_FAST = re.compile(
    r"DLL (\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2}(?:\.\d{1,6})?+) - "
    r"Training Epoch: (\d+) Training Iteration: (\d+)\b[ \t]*(?:(average_loss|final_loss|step_loss) : (\S+))?")
#: a plain finite decimal (anything else: nan, inf, garbage goes through LogStream.loss)
_NUM = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\Z")
_FINAL_LOSS = re.compile(r"\bfinal_loss : (\S+)")
_SKIPPED = re.compile(r"\bskipped_steps : (\d+)")
_SUMMARY = re.compile(r"training_sequences_per_second : (\S+)")
_BATCH_PER_GPU = re.compile(r"PARAMETER batch_size_per_gpu : (\d+)")
_NPROC = re.compile(r"--nproc[_-]per[_-]node[= ](\d+)")
_NNODES = re.compile(r"--nnodes[= ](\d+)")


def _day_seconds(y: str, mo: str, d: str) -> float:
    """Seconds since the epoch at 00:00 UTC of the date."""
    return float(_dt.datetime(int(y), int(mo), int(d), tzinfo=_dt.timezone.utc).timestamp())
