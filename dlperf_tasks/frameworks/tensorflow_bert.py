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
``bert_config_file``, ``model_dir`` (../output), ``models_root`` (/workspace/models,
put on PYTHONPATH), ``extra_args``, ``env``.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._lines import FactCollector, round2, split_lines, strip_tag
from dlperf_tasks.frameworks.base import Framework, LaunchSpec, NodeSpec
from dlperf_tasks.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window

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
            "--bert_config_file=" + L.text(settings, "bert_config_file",
                                           "/datasets/bert/uncased_L-12_H-768_A-12/bert_config.json"),
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

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        fc = FactCollector()
        samples: list[Sample] = []
        prev: float | None = None
        day_offset = 0.0
        for n, raw in enumerate(split_lines(lines), 1):
            fc.line(raw)
            rank, text = strip_tag(raw)
            if "Train Step:" not in text:
                continue
            sm = _STEP.search(text)
            if not sm:
                fc.error(f"line {n}: unreadable 'Train Step:' line: {text[:120]!r}")
                continue
            am = _ABSL.match(text.lstrip())
            if am:
                mo, d, h, mi, s = (int(x) for x in am.group(1, 2, 3, 4, 5))
                frac = am.group(6)
                if not (1 <= mo <= 12):
                    fc.error(f"line {n}: bad month in absl prefix {text[:20]!r}")
                    continue
                t = (_DAYS_BEFORE[mo - 1] + d) * 86400.0 + h * 3600 + mi * 60 + s + int(frac.ljust(6, "0")) / 1e6
            else:
                cm = _CLOCK.search(text)
                if not cm:
                    fc.error(f"line {n}: 'Train Step:' line without a time stamp: {text[:120]!r}")
                    continue
                h, mi, s = (int(x) for x in cm.group(1, 2, 3))
                t = h * 3600 + mi * 60 + s + int(cm.group(4).ljust(6, "0")) / 1e6 + day_offset
                if prev is not None and t < prev:  # clock wrapped at midnight
                    day_offset += 86400.0
                    t += 86400.0
            prev = t
            step = int(sm.group(1))
            fc.iteration(step, rank)
            samples.append(Sample(iteration=step, value=t, unit="s", rank=rank, timestamp=t))
        return ParsedLog(samples=samples, facts=fc.finish())

    def check(self, parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
        if window.warmup < 1:
            return [f"window warmup must be >= 1 for the timestamp rule (got {window.warmup})"]
        if not parsed.samples:
            return ["no 'Train Step: N/M' line in the log"]
        n = len(parsed.samples)
        if n < window.total:
            last = parsed.samples[-1].iteration
            return [f"only {n} of {window.total} iterations (last 'Train Step' seen {last})"]
        a, b = parsed.samples[window.warmup - 1], parsed.samples[window.total - 1]
        if b.value - a.value <= 0:
            return [f"timestamps do not increase between Train Step {a.iteration} and {b.iteration}"]
        return []

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        if len(parsed.samples) < window.total or window.warmup < 1:
            raise ValueError(f"tensorflow_bert: only {len(parsed.samples)} 'Train Step' lines, "
                             f"need {window.total} (run check() first)")
        dt = parsed.samples[window.total - 1].value - parsed.samples[window.warmup - 1].value
        if dt <= 0:
            raise ValueError("tensorflow_bert: non-increasing timestamps (run check() first)")
        world = cell.topology.world_size
        return TrialMetric(value=round2(world * cell.batch_size_per_device * window.measure / dt))
