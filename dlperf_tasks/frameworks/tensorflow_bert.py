"""TensorFlow 2.3 BERT-base pretraining (tensorflow/models r2.3.0 ``official/nlp/bert``, seed 003).

Log format (absl logging; one process per node prints everything)::

    I0902 14:21:57.019941 140286429083456 model_training_utils.py:444] Train Step: 21/120  / loss = 10.71  masked_lm_accuracy = 0.010106 ...

DLPerf rule (``TensorFlow/bert/extract_tensorflow_logs_time.py``): count the lines
with ``Train Step:``; take the clock time of the ``warmup``-th and the
``warmup+measure``-th (DLPerf: 20th and 120th); speed = world x batch_per_device x
measure / (t_end - t_start), rounded to 2 decimals. DLPerf ignores the date, so a
run crossing midnight broke its numbers; here the absl MMDD is used (and a clock going
backwards without a date is taken as a midnight crossing).

Launching: one ``python3 run_pretraining.py`` per node (launch_mode "per_node"), with
DLPerf's patched multi-worker flags (``--worker_hosts``/``--task_index``) on several nodes.

Launcher settings: ``workdir`` (/workspace/models/official/nlp/bert), ``script``
(run_pretraining.py), ``python`` (python3), ``worker_port`` (11111, the port in
``--worker_hosts``), ``data_dir`` (/datasets/bert/wiki, ``*.tfrecord`` inside),
``bert_config`` (a catalog data file put on the nodes, see catalog/nodefiles.py; else
``bert_config_file``, a path in the container), ``model_dir`` (../output), ``models_root`` (/workspace/models,
put on PYTHONPATH), ``extra_args``, ``env``.
"""

from __future__ import annotations

import math
import re
from typing import Mapping

from dlperf_tasks.frameworks._launch import container_path
from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._precision import precision_problems
from dlperf_tasks.frameworks._lines import StepSpan, clock_seconds, round2, step_window, strip_tag, window_problems
from dlperf_tasks.frameworks._stream import LogStream, as_int, kv_args
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.core.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

_ABSL = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{1,2}):(\d{1,2}):(\d{1,2})\.(\d{1,6})\b")
_CLOCK = re.compile(r"(\d{1,2}):(\d{1,2}):(\d{1,2})\.(\d{1,6})")
_STEP = re.compile(r"Train Step:\s*(\d+)\s*/\s*(\d+)")
_DAYS_BEFORE = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334]


class TensorflowBert(Framework):
    name = "tensorflow_bert"
    log_framework = "tensorflow"
    log_model = "bert"
    log_prefix = "bert"
    launch_mode = "per_node"

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        topo = cell.topology
        L.check_nodes(nodes, node_rank, topo.nodes)
        settings = settings or {}
        data_dir = L.text(settings, "data_dir", "/datasets/bert/wiki").rstrip("/")
        models_root = L.text(settings, "models_root", "/workspace/models")
        argv = [
            L.text(settings, "python", "python3"),
            L.text(settings, "script", "run_pretraining.py"),
            f"--input_files={data_dir}/*.tfrecord",
            "--max_seq_length=128",
            "--max_predictions_per_seq=20",
            f"--train_batch_size={cell.batch_size_per_device * topo.world_size}",
            f"--num_steps_per_epoch={cell.window.total}",
            "--num_train_epochs=1",
            "--warmup_steps=10000",
            "--use_next_sentence_label=True",
            "--train_summary_interval=0",
            "--optimizer_type=adamw",
            f"--num_gpus={topo.gpus_per_node}",
            "--datasets_num_private_threads=8",
            f"--dtype={'fp16' if cell.precision == 'amp' else 'fp32'}",
            f"--enable_xla={'true' if cell.xla else 'false'}",
            f"--model_dir={L.text(settings, 'model_dir', '../output')}",
            "--bert_config_file=" + (
                container_path(L.text(settings, "bert_config", ""), settings) if settings.get("bert_config")
                else L.text(settings, "bert_config_file", "/datasets/bert/uncased_L-12_H-768_A-12/bert_config.json")),
        ]
        if topo.nodes > 1:
            port = L.integer(settings, "worker_port", 11111, 1, 65535)
            argv += [
                "--distribution_strategy=multi_worker_mirrored",
                "--worker_hosts=" + ",".join(f"{n.address}:{port}" for n in nodes),
                f"--task_index={node_rank}",
                "--all_reduce_alg=nccl",
            ]
        else:
            argv.append("--distribution_strategy=mirrored")
        argv += L.str_list(settings, "extra_args")
        env = {"PYTHONPATH": models_root}
        if cell.xla:
            env["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
        if topo.nodes > 1:
            env["NCCL_DEBUG"] = "INFO"
        if nodes[node_rank].interface:
            env["NCCL_SOCKET_IFNAME"] = nodes[node_rank].interface
        return LaunchSpec(argv=argv, env=L.env_from(settings, env),
                          workdir=L.text(settings, "workdir", models_root.rstrip("/") + "/official/nlp/bert"))

    plausible_max_per_gpu = 20000.0

    def step_span(self, parsed: ParsedLog, cell: Cell, window: Window) -> StepSpan | None:
        if window.warmup < 1:
            return None
        return step_window(parsed.samples, parsed.facts.stride, window.warmup, window.total)

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        if window.warmup < 1:
            return [f"window warmup must be >= 1 for the timestamp rule (got {window.warmup})"]
        if not parsed.samples:
            return ["no 'Train Step: N/M' line in the log"]
        reasons = self.args_problems(parsed.facts, cell)
        return reasons + window_problems(parsed.samples, span or self.step_span(parsed, cell, window), window,
                                         label="'Train Step'")

    @staticmethod
    def args_problems(facts, cell: Cell) -> list[str]:
        want = cell.batch_size_per_device * cell.topology.world_size
        out = []
        if facts.global_batch is not None and facts.global_batch != want:
            out.append(f"log's --train_batch_size is {facts.global_batch} ({facts.args_source}), the cell's "
                       f"global batch is {want} ({cell.batch_size_per_device} x {cell.topology.world_size} GPUs)")
        if facts.world_size is not None and facts.world_size != cell.topology.world_size:
            out.append(f"log's world size is {facts.world_size} ({facts.args_source}), the cell's is "
                       f"{cell.topology.world_size} ({cell.topology.name})")
        return out + precision_problems("tensorflow", facts, cell)

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window,
                     span: StepSpan | None = None) -> TrialMetric:
        if window.warmup < 1:
            raise ValueError("tensorflow_bert: window warmup must be >= 1 (run check() first)")
        start, end = span or self.step_span(parsed, cell, window)
        if start is None:
            raise ValueError(f"tensorflow_bert: the log stops before step {end} (run check() first)")
        dt = end.value - start.value
        if dt <= 0:
            raise ValueError("tensorflow_bert: non-increasing timestamps (run check() first)")
        world = cell.topology.world_size
        value = round2(world * cell.batch_size_per_device * (end.iteration - start.iteration) / dt)
        details = {"final_loss": parsed.facts.final_loss} if parsed.facts.final_loss is not None else {}
        return TrialMetric(value=value, details=details)


class TensorflowBertStream(LogStream):
    """tensorflow/models BERT log: absl ``Train Step: N/M`` lines; the flags of a launcher trace line."""

    def __init__(self, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        self._prev: float | None = None
        self._day_offset = 0.0

    def scan(self, block: str) -> str:
        rest = block
        if "Train Step:" in block:
            parts = _ABSL_STEP.split("\n" + block)
            if len(parts) // 9 == block.count("Train Step:") and not self._day_offset:
                if not self._columns(parts):
                    self._bulk(list(zip(*(parts[i::9] for i in range(1, 9)))))
                rest = "".join(parts[0::9])  # the crash-marker scan skips well-formed step lines
            else:
                for start, line in self.lines_with(block, "Train Step:"):
                    self._step(block, start, line)
        if "--train_batch_size=" in block:
            for _, line in self.lines_with(block, "--train_batch_size="):
                self._flags(line)
        return rest

    def _columns(self, parts: list) -> bool:
        """Untagged step lines of one day, numeric losses: columns through ``map`` at C speed.
        False: :meth:`_bulk` goes row by row (and names what is wrong)."""
        ranks, months, days, losses_s = parts[1::9], parts[2::9], parts[3::9], parts[8::9]
        if ranks.count(None) != len(ranks) or None in losses_s or len(set(zip(months, days))) != 1:
            return False
        m = int(months[0])
        if not 1 <= m <= 12:
            return False
        day = (_DAYS_BEFORE[m - 1] + int(days[0])) * 86400.0
        try:
            ts = clock_seconds(day, parts[4::9], parts[5::9], parts[6::9])
            steps = list(map(int, parts[7::9]))
            losses = list(map(float, losses_s))
        except ValueError:
            return False
        if not -math.inf < sum(losses) < math.inf or (self._prev is not None and ts[0] < self._prev):
            return False
        self.samples.add_columns(steps, ts, "s", timestamp=ts, loss=losses)
        self.fc._iters.update(steps)
        self.fc.facts.final_loss = losses[-1]
        self._prev = ts[-1]
        top = max(steps)
        if self.max_iteration is None or top > self.max_iteration:
            self.max_iteration = top
        return True

    def _bulk(self, rows: list[tuple]) -> None:
        """Every step line has an absl prefix: no per-line regex work beyond one ``findall``."""
        samples, iters, ranks = self.samples, self.fc._iters, self.fc._ranks
        top = self.max_iteration if self.max_iteration is not None else -1
        t = self._prev
        for rank_s, mo, d, h, mi, secs, step_s, loss_s in rows:
            m = int(mo)
            if not 1 <= m <= 12:
                self.fc.error(f"bad month {mo} in an absl prefix")
                continue
            t = (_DAYS_BEFORE[m - 1] + int(d)) * 86400.0 + int(h) * 3600 + int(mi) * 60 + float(secs)
            step = int(step_s)
            rank = int(rank_s) if rank_s else None
            loss = None
            if loss_s:
                loss = float(loss_s) if _NUM.match(loss_s) else self.loss(step, "loss", loss_s)
                self.fc.facts.final_loss = loss
            samples.append(Sample(step, t, "s", rank, t, None, loss))
            iters.add(step)
            if rank is not None:
                ranks.add(rank)
            if step > top:
                top = step
        self._prev = t
        if top >= 0:
            self.max_iteration = top

    def _step(self, block: str, start: int, raw: str) -> None:
        rank, text = strip_tag(raw)
        where = _Where(self, block, start)
        sm = _STEP.search(text)
        if not sm:
            self.fc.error(f"{where}: unreadable 'Train Step:' line: {text[:120]!r}")
            return
        am = _ABSL.match(text.lstrip())
        if am:
            mo, d, h, mi, s = (int(x) for x in am.group(1, 2, 3, 4, 5))
            if not (1 <= mo <= 12):
                self.fc.error(f"{where}: bad month in absl prefix {text[:20]!r}")
                return
            t = (_DAYS_BEFORE[mo - 1] + d) * 86400.0 + h * 3600 + mi * 60 + s + int(am.group(6).ljust(6, "0")) / 1e6
        else:
            cm = _CLOCK.search(text)
            if not cm:
                self.fc.error(f"{where}: 'Train Step:' line without a time stamp: {text[:120]!r}")
                return
            h, mi, s = (int(x) for x in cm.group(1, 2, 3))
            t = h * 3600 + mi * 60 + s + int(cm.group(4).ljust(6, "0")) / 1e6 + self._day_offset
            if self._prev is not None and t < self._prev:  # clock wrapped at midnight
                self._day_offset += 86400.0
                t += 86400.0
        self._prev = t
        step = int(sm.group(1))
        loss = None
        lm = _TF_LOSS.search(text)
        if lm:
            loss = self.loss(step, "loss", lm.group(1))
            self.fc.facts.final_loss = loss
        self.add(Sample(iteration=step, value=t, unit="s", rank=rank, timestamp=t, loss=loss))

    def _flags(self, line: str) -> None:
        if "run_pretraining" not in line:
            return
        args = kv_args(line)
        f = self.fc.facts
        f.args.update({k: args[k] for k in ("train_batch_size", "num_gpus", "worker_hosts", "dtype",
                                            "enable_xla", "bert_config_file") if k in args})
        f.args_source = "flags of the run_pretraining.py command line in the log"
        f.global_batch = as_int(args.get("train_batch_size"))
        gpus = as_int(args.get("num_gpus"))
        if gpus:
            hosts = args.get("worker_hosts")
            f.world_size = gpus * (len(hosts.split(",")) if hosts else 1)


_ABSL_STEP = re.compile(
    r"\n(?:\[\d+,(\d+)\]<\w+>:)?[ \t]*+[IWEF](\d\d)(\d\d) (\d{1,2}):(\d{1,2}):(\d{1,2}\.\d{1,6})\b[^\n]*?"
    r"Train Step:\s*+(\d++)\s*+/\s*+\d++(?:\s*+/\s*+loss\s*+=\s*+(\S++))?+[^\n]*+")
#: (possessive ``*+``/``++``/``?+`` only where giving characters back can never lead to a match:
#: the same text is read, ~25 % faster; the trailing ``[^\n]*+`` takes the metrics after the loss,
#: so the text between matches, which the crash-marker scan reads, holds no piece of a step line)
_NUM = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?\Z")


class _Where:
    """``f"{where}"`` -> "line N", computed only when an error message is built."""

    def __init__(self, stream, block: str, pos: int) -> None:
        self.args = (stream, block, pos)

    def __str__(self) -> str:
        stream, block, pos = self.args
        return f"line {stream.line_no(block, pos)}"


_TF_LOSS = re.compile(r"Train Step:\s*\d+\s*/\s*\d+\s*/\s*loss\s*=\s*(\S+)")

TensorflowBert.Stream = TensorflowBertStream
