"""MXNet ResNet50-v1b (gluon-cv ``scripts/classification/imagenet/train_horovod.py``, seed 004).

Log format (global rank 0 only, Python logging on stderr)::

    INFO:root:Epoch[0] Rank[0] Batch[21]\\taccuracy=0.000710\\tlr=0.000070
    INFO:root:Epoch[0] Batch[21]\\tSpeed: 2561.59 samples/sec

The ``Speed`` value is already global (num_workers x batch x log_interval / time).
DLPerf rule (``MxNet/Classification/RN50v1b/extract_mxnet_logs.py``): read the
``Speed`` of every ``Epoch[0] Batch[`` line (rounded to 2 decimals), average batches
``warmup+1 .. warmup+measure`` and round to 2 decimals.

gluon-cv's single-process ``train_imagenet.py`` (and ``train_mixup_imagenet.py``,
``train_imagenet_nasnet.py``, every version 2018-2021) logs
``Epoch[%d] Batch [%d]\\tSpeed: %f samples/sec\\t<metric>=%f...`` with a space before ``[``,
the batch counted **from 0** and printed when ``(i+1) % log_interval == 0``; its speed is the
process's (= all its GPUs': batch_size x num_gpus x log_interval / time). ``train_horovod.py``
counts from 1 (``enumerate(train_data, start=1)``). Samples are keyed by the 1-based last batch
a line covers (``Batch [49]`` -> 50, ``Batch[50]`` -> 50). With ``log_interval`` s > 1 a line
covers s batches: the rule averages the lines whose last batch lies in ``warmup+1 .. total``
(with s = 1, DLPerf's rule), and needs every s-th line from the first up to ``total``.
MXNet's Module ``Speedometer`` form ``Batch [a-b]`` (per worker under a kvstore) is not read.

DLPerf ran a locally modified ``train_horovod.py`` that logs the Speed line each
batch and stops after 120 batches (fixture README). The stop is passed as
``--num-batches <window.total>`` (settings ``batches_arg`` renames or, set to "",
drops it); the suite's patch must add that option to the script.

Launcher settings: ``workdir`` (/workspace/gluon-cv/scripts/classification/imagenet),
``script`` (train_horovod.py), ``python``, ``mpirun``, ``ssh_port`` (22), ``data_dir``
(/datasets/ImageNet/MXNet, holding train.rec/val.rec), ``batches_arg`` (--num-batches),
``mpi_export``, ``mpi_args``, ``extra_args``, ``env``.
"""

from __future__ import annotations

import math
import re
from itertools import repeat
from typing import Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._precision import precision_problems
from dlperf_tasks.frameworks._lines import StepSpan, fmt_list, parse_float, round2
from dlperf_tasks.frameworks._stream import LogStream, as_int, kv_args, kv_pattern
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.frameworks.mxnet_bert import build_mpirun
from dlperf_tasks.core.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

_RANK = re.compile(r"Epoch\[\d+\] Rank\[(\d+)\] Batch\[")


class MxnetResnet50(Framework):
    name = "mxnet_resnet50"
    log_framework = "mxnet"
    log_model = "resnet50"
    log_prefix = "rn50"
    launch_mode = "mpi"

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        L.check_nodes(nodes, node_rank, cell.topology.nodes)
        if node_rank != 0:
            raise ValueError("mxnet_resnet50 is launched by one mpirun on node 0 (launch_mode 'mpi')")
        settings = settings or {}
        data_dir = L.text(settings, "data_dir", "/datasets/ImageNet/MXNet").rstrip("/")
        dtype = "float16" if cell.precision == "amp" else "float32"
        script = [
            L.text(settings, "python", "python3"),
            L.text(settings, "script", "train_horovod.py"),
            "--mode=hybrid",
            "--model=resnet50_v1b",
            "--use-rec",
            f"--rec-train={data_dir}/train.rec",
            f"--rec-val={data_dir}/val.rec",
            f"--batch-size={cell.batch_size_per_device}",
            f"--dtype={dtype}",
            "--log-interval=1",
            "--save-frequency=10000",
            "--lr=0.001",
            "--momentum=0.875",
            "--wd=0.000030518",
            "--num-epochs=1",
            "--warmup-epochs=1",
        ]
        batches_arg = L.text(settings, "batches_arg", "--num-batches")
        if batches_arg:
            script.append(f"{batches_arg}={cell.window.total}")
        script += L.str_list(settings, "extra_args")
        env = L.env_from(settings, {"NCCL_DEBUG": "INFO"})
        argv = build_mpirun(trial, nodes, settings, script, env)
        return LaunchSpec(argv=argv, env=env,
                          workdir=L.text(settings, "workdir", "/workspace/gluon-cv/scripts/classification/imagenet"))

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        seen = set(parsed.samples.iteration)
        if not seen:
            return ["no 'Epoch[0] Batch[N]\\tSpeed: X samples/sec' (train_horovod.py) or "
                    "'Epoch[0] Batch [N]\\tSpeed: X samples/sec' (train_imagenet.py) line in the log"]
        kv = str(parsed.facts.args.get("kvstore") or parsed.facts.args.get("kv_store") or "").strip("'\"")
        if "dist" in kv:
            return [f"log's kvstore is {kv!r} (Namespace line): each worker logs its own Speed, not the "
                    "global one the rule averages (gluon-cv train_horovod.py / single-process train_imagenet.py)"]
        bpd = parsed.facts.batch_per_device
        if bpd is not None and bpd != cell.batch_size_per_device:
            return [f"log's batch size per GPU is {bpd} (gluon-cv Namespace line), the cell's is "
                    f"{cell.batch_size_per_device}"]
        wrong = precision_problems("mxnet", parsed.facts, cell)
        if wrong:
            return wrong
        need = _needed(seen, parsed.facts.stride, window.total)
        missing = [i for i in need if i not in seen]
        if missing:
            have = window.total - len(missing) * max(int(parsed.facts.stride or 1), 1)
            return [f"only {max(have, 0)} of {window.total} iterations (last batch seen {max(seen)}; "
                    f"missing batches {fmt_list(missing)})"]
        if not [i for i in need if i > window.warmup]:
            return [f"no Speed line ends inside the window {window.warmup + 1}..{window.total} "
                    f"(log_interval {parsed.facts.stride})"]
        return []

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> TrialMetric:
        samples = parsed.samples  # the first line of a batch wins (DLPerf): read backwards, earlier lines overwrite
        by_batch = dict(zip(reversed(samples.iteration), reversed(samples.value)))
        steps = [i for i in _needed(by_batch, parsed.facts.stride, window.total) if i > window.warmup]
        if not steps:
            raise ValueError("mxnet_resnet50: no Speed line inside the window (run check() first)")
        missing = [i for i in steps if i not in by_batch]
        if missing:
            raise ValueError(f"mxnet_resnet50: batches {fmt_list(missing)} have no Speed line (run check() first)")
        vals = [by_batch[i] for i in steps]
        return TrialMetric(value=round2(sum(vals) / len(vals)))

    plausible_max_per_gpu = 30000.0


def _needed(seen, stride: int | None, total: int) -> list[int]:
    """The last batches the log's Speed lines must show up to ``total``: every batch, or every
    ``stride``-th (``log_interval``) from the first line's."""
    stride = max(int(stride or 1), 1)
    first = min(seen) if stride > 1 and seen else 1
    return list(range(first, total + 1, stride))


class MxnetResnet50Stream(LogStream):
    """gluon-cv ``train_horovod.py`` / ``train_imagenet.py`` log: ``Epoch[0] Batch[N]\\tSpeed: X samples/sec``
    or ``Epoch[0] Batch [i]\\tSpeed: ...`` lines (rank 0),
    ``Rank[r]`` lines, and the option Namespace line (``--batch-size``)."""

    def __init__(self, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        self._last: tuple = (None, None)  # (batch, speed) of the last Speed line added (bulk path)
        self._last_each: tuple = (None, None, None)  # (batch, speed, rank), line-by-line path

    def scan(self, block: str) -> str:
        parts = _FAST.split(block)  # [text, epoch, space, batch, speed, text, ...]
        if len(parts) > 1:
            if "]<std" in block or not self._bulk(parts):  # mpirun --tag-output: ranks per line
                self._each(block)
            block = "".join(parts[0::5])  # the rest: the crash-marker scan skips well-formed Speed lines
        if "Speed:" in block and ("Batch[" in block or "Batch [" in block):
            for start, line in self.lines_with(block, "Speed:"):
                if "Batch[" in line or "Batch [" in line:
                    self.fc.error(f"line near {self.line_no(block, start)}: unreadable Speed line: {line[:120]!r}")
        rest = block
        if "Rank[" in block:
            parts = _RANK_LINE.split(block)
            self.fc._ranks.update(map(int, parts[1::2]))
            rest = "".join(parts[0::2])  # the crash-marker scan skips these well-formed lines
        if "Namespace(" in block:
            for _, line in self.lines_with(block, "Namespace("):
                args = kv_args(line[line.index("Namespace("):], _NAMESPACE_KV)
                if "batch_size" in args:
                    self.fc.facts.args.update({k: args[k] for k in _NAMESPACE_KEYS if k in args})
                    self.fc.facts.args_source = "gluon-cv Namespace line"
                    self.fc.facts.batch_per_device = as_int(args["batch_size"])
                    self.fc.facts.stride = as_int(args.get("log_interval")) or self.fc.facts.stride
        return rest

    def _bulk(self, parts: list[str]) -> bool:
        """Columns at C speed; False (nothing added) when a value needs the line-by-line path."""
        epochs, spaces, texts = parts[1::5], parts[2::5], parts[4::5]
        try:
            batches = list(map(int, parts[3::5]))
            vals = list(map(float, texts))
        except ValueError:
            return False
        if epochs.count("0") != len(epochs) or not (min(vals) > 0 and sum(vals) < math.inf):
            return False
        if spaces.count(""):
            if len(spaces) != spaces.count(""):
                return False  # both forms in one block: line by line
        else:  # 'Batch [i]' (train_imagenet.py): i counts from 0
            batches = [b + 1 for b in batches]
        if not _TWO_DECIMALS.fullmatch("\n".join(texts)):  # gluon-cv prints %.2f: then round(v, 2) is v
            vals = list(map(round, vals, repeat(2, len(vals))))
        if len(set(batches)) < len(batches) or batches[0] == self._last[0]:
            batches, vals = self._one_per_metric(batches, vals)
            if not batches:
                return True
        self._last = (batches[-1], vals[-1])
        self.samples.add_columns(batches, vals, "samples/s")
        self.fc._iters.update(batches)
        top = max(batches)
        if self.max_iteration is None or top > self.max_iteration:
            self.max_iteration = top
        return True

    def _each(self, block: str) -> None:
        for m in _FAST.finditer(block):
            epoch, batch = int(m.group(1)), int(m.group(3)) + len(m.group(2))  # 'Batch [i]': i counts from 0
            if epoch != 0:
                continue
            v = parse_float(m.group(4))
            if v is None or v <= 0:
                self.fc.error(f"line {self.line_no(block, m.start())}: batch {batch} speed {m.group(4)!r} is not "
                              "a positive finite number")
                continue
            start = block.rfind("\n", 0, m.start()) + 1
            rank = self.rank_at(block, start)
            if (batch, round(v, 2), rank) == self._last_each:
                continue  # the same Speed again, one line per metric (MXNet Speedometer)
            self._last_each = (batch, round(v, 2), rank)
            self.add(Sample(iteration=batch, value=round(v, 2), unit="samples/s", rank=rank))

    def _one_per_metric(self, batches: list[int], vals: list[float]) -> tuple[list[int], list[float]]:
        """Drop a line that repeats the previous line's batch and speed: MXNet's ``Speedometer``
        prints one line per training metric (``Train-accuracy``, ``Train-top_k_accuracy_5``) with
        the same Speed. A batch logged again with another speed is kept (a restart or one line per
        worker: the gate refuses it)."""
        out_b, out_v = [], []
        last = self._last
        for b, v in zip(batches, vals):
            if (b, v) != last:
                out_b.append(b)
                out_v.append(v)
            last = (b, v)
        return out_b, out_v


#: Namespace keys read: the per-device batch, precision, Speed-line stride, and the kvstore (a
#: ``dist_*`` kvstore means one process per worker, each logging its own speed)
_NAMESPACE_KEYS = ("batch_size", "dtype", "log_interval", "kvstore", "kv_store", "model")
_NAMESPACE_KV = kv_pattern(*_NAMESPACE_KEYS)
#: groups: epoch, the space before ``[`` (``Batch [i]``: ``train_imagenet.py``, i from 0), batch, speed
_FAST = re.compile(r"Epoch\[(\d++)\] Batch( ?+)\[(\d++)\]\s*+Speed:\s*+(\S+) samples/sec")
#: speeds with at most 2 decimals, one a line (``round(float(t), 2)`` is ``float(t)`` for them:
#: rounding costs ~0.2 us a value, a third of this parser's time per line)
_TWO_DECIMALS = re.compile(r"\d++(?:\.\d{0,2}+)?+(?:\n\d++(?:\.\d{0,2}+)?+)*+")
_RANK_LINE = re.compile(r"Epoch\[\d+\] Rank\[(\d+)\] Batch\[\d+\][^\n]*")

MxnetResnet50.Stream = MxnetResnet50Stream
