"""MXNet ResNet50-v1b (gluon-cv ``scripts/classification/imagenet/train_horovod.py``, seed 004).

Log format (global rank 0 only, Python logging on stderr)::

    INFO:root:Epoch[0] Rank[0] Batch[21]\\taccuracy=0.000710\\tlr=0.000070
    INFO:root:Epoch[0] Batch[21]\\tSpeed: 2561.59 samples/sec

The ``Speed`` value is already global (num_workers x batch x log_interval / time).
DLPerf rule (``MxNet/Classification/RN50v1b/extract_mxnet_logs.py``): read the
``Speed`` of every ``Epoch[0] Batch[`` line (rounded to 2 decimals), average batches
``warmup+1 .. warmup+measure`` and round to 2 decimals.

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

import re
from typing import Iterable, Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._lines import FactCollector, fmt_list, parse_float, round2, split_lines, strip_tag
from dlperf_tasks.frameworks.base import Framework, LaunchSpec, NodeSpec
from dlperf_tasks.frameworks.mxnet_bert import build_mpirun
from dlperf_tasks.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window

_SPEED = re.compile(r"Epoch\[(\d+)\] Batch\[(\d+)\]\s*Speed:\s*(\S+) samples/sec")
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

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        fc = FactCollector()
        samples: list[Sample] = []
        for n, raw in enumerate(split_lines(lines), 1):
            fc.line(raw)
            tag_rank, text = strip_tag(raw)
            if "Batch[" not in text:
                continue
            rm = _RANK.search(text)
            if rm:
                fc.rank(int(rm.group(1)) if tag_rank is None else tag_rank)
                continue
            if "Speed:" not in text:
                continue
            m = _SPEED.search(text)
            if not m:
                fc.error(f"line {n}: unreadable Speed line: {text[:120]!r}")
                continue
            epoch, batch = int(m.group(1)), int(m.group(2))
            if epoch != 0:
                continue  # DLPerf reads epoch 0 only
            v = parse_float(m.group(3))
            if v is None or v <= 0:
                fc.error(f"line {n}: batch {batch} speed {m.group(3)!r} is not a positive finite number")
                continue
            fc.iteration(batch, tag_rank)
            samples.append(Sample(iteration=batch, value=round(v, 2), unit="samples/s", rank=tag_rank))
        return ParsedLog(samples=samples, facts=fc.finish())

    def check(self, parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
        seen = {s.iteration for s in parsed.samples}
        if not seen:
            return ["no 'Epoch[0] Batch[N]\\tSpeed: X samples/sec' line in the log"]
        need = range(1, window.total + 1)
        missing = [i for i in need if i not in seen]
        if missing:
            have = window.total - len(missing)
            return [f"only {have} of {window.total} iterations (last batch seen {max(seen)}; "
                    f"missing batches {fmt_list(missing)})"]
        return []

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        by_batch: dict[int, float] = {}
        for s in parsed.samples:
            by_batch.setdefault(s.iteration, s.value)
        steps = range(window.warmup + 1, window.total + 1)
        missing = [i for i in steps if i not in by_batch]
        if missing:
            raise ValueError(f"mxnet_resnet50: batches {fmt_list(missing)} have no Speed line (run check() first)")
        vals = [by_batch[i] for i in steps]
        return TrialMetric(value=round2(sum(vals) / len(vals)))
