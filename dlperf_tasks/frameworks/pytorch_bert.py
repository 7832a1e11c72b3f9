"""NGC PyTorch BERT-base pretraining (NVIDIA DeepLearningExamples ``run_pretraining.py``, seed 001).

Log format (global rank 0 only, dllogger ``StdOutBackend``; tqdm writes ``\\r`` progress
bars into the same file, so a DLL line may be glued after a bar fragment)::

    DLL 2020-09-24 03:15:18.714846 - Training Epoch: 0 Training Iteration: 25  average_loss : 10.5  step_loss : 10.5  learning_rate : 0.001

DLPerf rule (``extract_pytorch_logs_time.py``): count the ``Training Epoch:`` lines
whose step is > 5 (steps 1-5 are skipped); take the timestamps of the ``warmup``-th
and the ``warmup+measure``-th counted lines; speed = world x batch_per_device x
measure / (t_end - t_start), rounded to 2 decimals. dlperf counts **steps**, not lines
(``_lines.step_window``: a log with ``log_freq`` 50 covers 50 steps a line), and a
logged step is ``gradient_accumulation_steps`` micro-batches (read from the log's
``PARAMETER Config`` line, where DLE prints ``train_batch_size`` already divided by the
accumulation): samples per step = world x micro-batch x accumulation. DLE's own final
``training_sequences_per_second`` is kept beside it (flagged beyond 2 %). DLPerf's README invocation
``--warmup_batches 20 --train_batches 120`` is ``Window(warmup=20, measure=100)``
(start = 20th counted line = step 25, end = 120th = step 125); the script defaults
20/110 are ``Window(20, 90)``. A log therefore needs ``5 + window.total`` steps;
:meth:`launch` asks for ``window.total + 5`` optimizer steps (``max_iter``; 125 with the
default window): every step is ``accumulation`` micro-batches, so each extra step is costly.

Launching: one ``python3 -m torch.distributed.launch`` per node (launch_mode "per_node"), DLE's
phase-1 flags as seed 001 ran them: ``--train_batch_size`` = batch per device x accumulation (DLE
divides it by ``--gradient_accumulation_steps``), ``--allreduce_post_accumulation`` (+ ``_fp16``
with AMP) when accumulating, the BERT-base config shipped by the catalog.

Launcher settings: ``workdir`` (/workspace/examples/bert), ``script``
(run_pretraining.py), ``python`` (python3), ``master_port`` (29500), ``data_dir``
(input hdf5 dir), ``bert_config`` (catalog data file put on the nodes, passed as
``/dlperf/catalog/<file>`` or ``<node_files_dir>/<file>``), else ``config_file`` (a path; default
the repository's bert_config.json = BERT-large), ``output_dir`` (results/checkpoints),
``learning_rate`` (6e-3), ``warmup_proportion`` (0.2843), ``seed`` (42), ``max_iter`` (alias
``max_steps``; window.total+5), ``gradient_accumulation_steps`` (when the cell has none; 1),
``optimizer`` (lamb|adam: recorded, DLE has no flag), ``extra_args``, ``env``.
"""

from __future__ import annotations

import datetime as _dt
import math
import operator
import re
from typing import Mapping

from dlperf_tasks.frameworks._launch import container_path

try:  # the compiled step-line reader (setup.py builds it; without it: the pure-Python path, same results)
    from dlperf_tasks.frameworks import _cdll, _cstream
except ImportError:  # pragma: no cover - a machine without a C compiler
    _cdll = _cstream = None
from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._precision import precision_problems
from dlperf_tasks.frameworks._lines import _CRASH_HINTS, clock_seconds, round2, step_window, window_problems
from dlperf_tasks.frameworks._stream import LogStream, as_float, as_int, kv_args
from dlperf_tasks.frameworks.base import Framework, LaunchSpec, NodeSpec
from dlperf_tasks.core.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window

#: DLPerf skips steps 1..SKIP_STEPS
SKIP_STEPS = 5
DEFAULT_DATA = ("/workspace/bert/data/hdf5_lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15"
                "_random_seed_12345_dupe_factor_5/wikicorpus_en/")


def max_iter(cell: Cell, settings: Mapping) -> int:
    """Optimizer steps of one trial (``--max_steps``; seed 001's ``max_iter``, which the Paddle
    benchmark sibling scripts pass as the trainer's iteration count). Default: just enough for the
    DLPerf rule (5 skipped steps + window), because every step is ``accumulation`` micro-batches."""
    need = cell.window.total + (SKIP_STEPS if cell.window.rule == "timestamps" else 0)
    default = settings.get("max_steps") if settings.get("max_steps") is not None else need
    return L.integer(settings, "max_iter", default, minimum=need)


def config_path(settings: Mapping, workdir: str) -> str:
    """``--config_file``: the catalog's data file on the node (``bert_config``), else ``config_file``,
    else the repository's ``bert_config.json`` (BERT-large at the pinned commit)."""
    if settings.get("bert_config"):
        return container_path(L.text(settings, "bert_config", ""), settings)
    return L.text(settings, "config_file", workdir.rstrip("/") + "/bert_config.json")


class PytorchBert(Framework):
    name = "pytorch_bert"
    log_framework = "ngc/pytorch"
    log_model = "bert"
    log_prefix = "bert-base-adam-training"
    launch_mode = "per_node"

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        topo = cell.topology
        L.check_nodes(nodes, node_rank, topo.nodes)
        settings = settings or {}
        workdir = L.text(settings, "workdir", "/workspace/examples/bert")
        acc = cell.accumulation if cell.accumulation is not None else L.integer(
            settings, "gradient_accumulation_steps", 1)
        steps = max_iter(cell, settings)
        if L.text(settings, "optimizer", "lamb") not in ("lamb", "adam"):
            raise CatalogError(f"launcher.optimizer must be lamb or adam, got {settings['optimizer']!r}")
        argv = [
            L.text(settings, "python", "python3"), "-m", "torch.distributed.launch",
            f"--nproc_per_node={topo.gpus_per_node}",
            "--nnodes", str(topo.nodes),
            f"--node_rank={node_rank}",
            f"--master_addr={nodes[0].address}",
            f"--master_port={L.integer(settings, 'master_port', 29500, 1, 65535)}",
            L.text(settings, "script", "run_pretraining.py"),
            f"--input_dir={L.text(settings, 'data_dir', DEFAULT_DATA)}",
            f"--output_dir={L.text(settings, 'output_dir', workdir.rstrip('/') + '/results/checkpoints')}",
            f"--config_file={config_path(settings, workdir)}",
            "--bert_model=bert-base-uncased",
            # DLE: --train_batch_size is the per-GPU batch of one optimizer step; the script divides it
            # by the accumulation steps to get the micro-batch (= the cell's batch size per device)
            f"--train_batch_size={cell.batch_size_per_device * acc}",
            "--max_seq_length=128",
            "--max_predictions_per_seq=20",
            f"--max_steps={steps}",
            f"--warmup_proportion={L.text(settings, 'warmup_proportion', '0.2843')}",
            f"--num_steps_per_checkpoint={max(1000, steps + 1)}",
            f"--learning_rate={L.text(settings, 'learning_rate', '6e-3')}",
            f"--seed={L.integer(settings, 'seed', 42, 0)}",
            f"--gradient_accumulation_steps={acc}",
        ]
        if cell.precision == "amp":
            argv.append("--fp16")
        if acc > 1:  # DLE's scripts/run_pretraining.sh (allreduce_post_accumulation{,_fp16}="true" for every
            # precision; seed 001's fp32 logs show both on); seed 001's "no GradAcc" runs set both false
            argv += ["--allreduce_post_accumulation", "--allreduce_post_accumulation_fp16"]
        argv += ["--do_train", "--json-summary", workdir.rstrip("/") + "/dllogger.json"]
        argv += L.str_list(settings, "extra_args")
        base_env = {"NCCL_DEBUG": "INFO"} if topo.nodes > 1 else {}
        if nodes[node_rank].interface:
            base_env["NCCL_SOCKET_IFNAME"] = nodes[node_rank].interface
        return LaunchSpec(argv=argv, env=L.env_from(settings, base_env), workdir=workdir)

    def log_relpath(self, trial: Trial, node_rank: int = 0) -> str:
        """The seeds' layout; cells with an accumulation parameter get ``_ga<N>`` before the trial
        index (``bert-base-adam-training_b32_fp32_ga1_1.log``) so "no GradAcc" logs stay apart."""
        path = super().log_relpath(trial, node_rank)
        acc = trial.cell.accumulation
        if acc is None:
            return path
        head, sep, tail = path.rpartition(f"_{trial.index}.")
        return f"{head}_ga{acc}{sep}{tail}"

    Stream = None  # set below (PytorchBertStream)
    plausible_max_per_gpu = 20000.0

    def check(self, parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
        if window.rule == "summary":
            return summary_problems(parsed, cell, window)
        if window.warmup < 1:
            return [f"window warmup must be >= 1 for the timestamp rule (got {window.warmup})"]
        if not parsed.samples:
            return ["no 'DLL ... Training Epoch: E Training Iteration: N' line in the log"]
        reasons = args_vs_cell(parsed.facts, cell)
        return reasons + window_problems(parsed.samples, parsed.facts.stride, window, SKIP_STEPS,
                                         after=f" after the first {SKIP_STEPS} steps")

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        if window.rule == "summary":
            return summary_metric(parsed, cell)
        if window.warmup < 1:
            raise ValueError("pytorch_bert: window warmup must be >= 1 (run check() first)")
        start, end = step_window(parsed.samples, parsed.facts.stride, window.warmup, window.total, SKIP_STEPS)
        if start is None:
            raise ValueError(f"pytorch_bert: the log stops before step {end} (run check() first)")
        dt = end.value - start.value
        if dt <= 0:
            raise ValueError("pytorch_bert: non-increasing timestamps (run check() first)")
        per_step = samples_per_step(parsed.facts, cell)
        value = round2(per_step * (end.iteration - start.iteration) / dt)
        return TrialMetric(value=value, details=framework_figure_details(parsed.facts, value, per_step))


#: seed 001's rule cross-checks DLE's summary against the step timestamps: beyond this, the trial is invalid
SUMMARY_TOLERANCE = 0.05
#: step lines needed for the cross-check (the first one ends a step that includes the start-up)
CROSS_CHECK_LINES = 3


def timestamp_figure(parsed: ParsedLog, cell: Cell) -> float | None:
    """Samples/s from the step lines' timestamps (first to last line, skipped steps included as work),
    None with fewer than :data:`CROSS_CHECK_LINES` lines, no elapsed time, or when the log does not state
    its gradient accumulation (an excerpt without the ``PARAMETER Config`` line: the samples per step
    would be a guess, so the figures cannot be compared)."""
    s = parsed.samples
    if len(s) < CROSS_CHECK_LINES or parsed.facts.accumulation is None:
        return None
    first, last = s[0], s[len(s) - 1]
    dt = last.value - first.value
    if not dt > 0:
        return None
    return samples_per_step(parsed.facts, cell) * (last.iteration - first.iteration) / dt


def summary_problems(parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
    """``check()`` under seed 001's rule: DLE's summary line is there, the run did ``window.measure``
    optimizer steps, the run's arguments agree with the cell, and the step timestamps agree with the
    summary within :data:`SUMMARY_TOLERANCE`."""
    facts = parsed.facts
    out = args_vs_cell(facts, cell)
    if not parsed.samples:
        return out + ["no 'DLL ... Training Epoch: E Training Iteration: N' line in the log"]
    fig = facts.framework_figure
    if fig is None:
        out.append("no DLE summary line 'training_sequences_per_second : X' (the run did not finish; the "
                   "summary rule needs it; --speed-rule timestamps reads the step lines instead)")
        return out
    steps_done = max(parsed.samples.iteration) - facts.skipped_steps * _stride(facts)
    if steps_done < window.measure:
        out.append(f"the log ends at optimizer step {steps_done}, the rule needs {window.measure}")
    ts = timestamp_figure(parsed, cell)
    if ts is not None and math.isfinite(fig) and fig > 0:
        diff = (fig - ts) / ts
        if abs(diff) > SUMMARY_TOLERANCE:
            out.append(f"DLE training_sequences_per_second {fig:.2f} and the step timestamps' {ts:.2f} samples/s "
                       f"differ by {diff * 100:+.1f}% (more than {SUMMARY_TOLERANCE * 100:.0f}%)")
    return out


def summary_metric(parsed: ParsedLog, cell: Cell) -> TrialMetric:
    """Seed 001's figure: DLE's own ``training_sequences_per_second`` (total sequences / raw_train_time),
    rounded to 2 decimals; the timestamps' figure and the skipped steps beside it."""
    fig = parsed.facts.framework_figure
    if fig is None:
        raise ValueError("pytorch_bert: no training_sequences_per_second line (run check() first)")
    details: dict = {"rule": "summary", "samples_per_step": samples_per_step(parsed.facts, cell),
                     "framework_figure_name": parsed.facts.framework_figure_name}
    ts = timestamp_figure(parsed, cell)
    if ts is not None:
        details["timestamp_figure"] = round2(ts)
    else:
        details["flags"] = ["DLE's figure not cross-checked: " + (
            "the log states no gradient accumulation (no PARAMETER Config line)"
            if parsed.facts.accumulation is None else
            f"fewer than {CROSS_CHECK_LINES} step lines, or no time between the first and the last")]
    if parsed.facts.skipped_steps:
        details["skipped_steps"] = parsed.facts.skipped_steps
    if parsed.facts.final_loss is not None:
        details["final_loss"] = parsed.facts.final_loss
    return TrialMetric(value=round2(fig), details=details)


def _stride(facts) -> int:
    """Steps between two logged step lines (DLE ``log_freq``; 1 when the log does not say)."""
    return max(int(facts.stride or 1), 1)


def cell_accumulation(cell: Cell) -> int | None:
    """The cell's gradient accumulation steps (catalog field), None when the cell does not say."""
    acc = getattr(cell, "gradient_accumulation_steps", None)
    return int(acc) if acc else None


def samples_per_step(facts, cell: Cell) -> int:
    """Samples per logged (optimizer) step over all GPUs: world x micro-batch x accumulation."""
    acc = facts.accumulation or cell_accumulation(cell) or 1
    return cell.topology.world_size * cell.batch_size_per_device * acc


def args_vs_cell(facts, cell: Cell) -> list[str]:
    """Reasons where the run's own arguments (read from the log) disagree with the cell."""
    out = []
    src = f" ({facts.args_source})" if facts.args_source else ""
    if facts.batch_per_device is not None and facts.batch_per_device != cell.batch_size_per_device:
        out.append(f"log's batch size per GPU is {facts.batch_per_device}{src}, the cell's is "
                   f"{cell.batch_size_per_device}")
    acc = cell_accumulation(cell)
    if facts.accumulation is not None and acc is not None and facts.accumulation != acc:
        out.append(f"log's gradient accumulation is {facts.accumulation}{src}, the cell's is {acc}")
    if facts.world_size is not None and facts.world_size != cell.topology.world_size:
        out.append(f"log's world size is {facts.world_size}{src}, the cell's is "
                   f"{cell.topology.world_size} ({cell.topology.name})")
    return out + precision_problems("dle", facts, cell)


def framework_figure_details(facts, value: float, per_step: int) -> dict:
    """The framework's own throughput figure next to dlperf's, flagged beyond 2 %."""
    details: dict = {"samples_per_step": per_step}
    if facts.final_loss is not None:
        details["final_loss"] = facts.final_loss
    fig = facts.framework_figure
    if fig is not None and value > 0:
        diff = (fig - value) / value
        details.update(framework_figure=fig, framework_figure_name=facts.framework_figure_name,
                       framework_disagreement=round(diff, 4))
        if abs(diff) > DISAGREE:
            details["flags"] = [f"{facts.framework_figure_name} = {fig:.2f} differs from dlperf's "
                                f"{value:.2f} by {diff * 100:+.1f}% (> {DISAGREE * 100:.0f}%)"]
    return details


#: a framework's own throughput figure further than this from dlperf's is flagged
DISAGREE = 0.02


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
        fast = _cdll.scan(block) if _cdll is not None and not self._ordinal else None
        # one pass over the rest (the block less the step lines) for PyTorch's literals and the crash hints:
        # the removed step lines hold none of them, and a literal across a removed line only costs a look
        found = _cstream.which(fast[0], _SCAN_LITERALS) if fast is not None else None
        if found is None or (fast[2] and (found & 1 or (
                self._last_step is not None and fast[2][0] <= self._last_step))):
            fast = None  # ordinal numbering, or a repeated/backward step across blocks: the Python path
        if fast is not None:
            self.rest_hints = found >> len(_LITERALS)
            return self._scan_fast(block, found, *fast)
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
        """:meth:`scan` with the step lines read by :mod:`_cdll` (the bulk case of :meth:`_bulk`) and the
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
                for _, line in self.lines_with(block, literal):
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
        days = _DAYS
        for y, mo, d, h, mi, secs, _epoch, step_s, name, loss_s in rows:
            day = days.get((y, mo, d))
            if day is None:
                try:
                    day = _day_seconds(y, mo, d)
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
            args = kv_args(line[line.index("Namespace("):], ("train_batch_size", "gradient_accumulation_steps",
                                                              "log_freq", "max_steps", "bert_model", "config_file",
                                                              "fp16", "amp"))
            keep = dict(args)
            f.args.update(keep)
            f.args_source = "DLE PARAMETER Config line"
            # DLE logs Config after setup_training() divided train_batch_size by the accumulation
            f.batch_per_device = as_int(args.get("train_batch_size"))
            f.accumulation = as_int(args.get("gradient_accumulation_steps"))
            freq = as_int(args.get("log_freq"))
            if freq:
                f.stride = freq
        m = _BATCH_PER_GPU.search(line)
        if m and f.batch_per_device is None:
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
_DAYS: dict[tuple[str, str, str], float] = {}


def _day_seconds(y: str, mo: str, d: str) -> float:
    """Seconds since the epoch at 00:00 UTC of the date (cached per date string triple)."""
    v = _DAYS.get((y, mo, d))
    if v is None:
        v = _DAYS[(y, mo, d)] = float(_dt.datetime(int(y), int(mo), int(d), tzinfo=_dt.timezone.utc).timestamp())
    return v


PytorchBert.Stream = PytorchBertStream
