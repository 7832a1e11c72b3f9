"""MXNet BERT-base pretraining (gluon-nlp ``scripts/bert/run_pretraining.py``, seed 000).

Log format (every rank prints one line per step, no rank prefix unless mpirun ran
with ``--tag-output``)::

    INFO:root:[step 101]\\tmlm_loss=7.38695\\tnsp_loss= 0.72\\tthroughput=16.0K tks/s\\tlr=0.0000505 time=0.24, latency=240.6 ms/batch

DLPerf rule (``MxNet/BERT/extract_mxnet_logs.py``): per line speed =
1000 / latency x batch_per_device x world (a global samples/s value); per step the
median over the ranks; the trial speed is the mean of steps ``warmup+1 ..
warmup+measure``, rounded to 2 decimals. DLPerf ran 120 steps and dropped 20; the
fixtures run 200 steps and are read with window 100/100.

Launching (``launch_mode = "mpi"``): one ``mpirun`` on node 0 starts every rank through
the containers' sshd, as DLPerf's ``pretrain.sh`` did.

Launcher settings (all optional; see docs/TEAM_NOTES.md for the common keys):
``workdir`` (/workspace/gluon-nlp/scripts/bert), ``script`` (run_pretraining.py),
``python`` (python3), ``mpirun`` (mpirun), ``ssh_port`` (port of the containers' sshd
for ``-mca plm_rsh_args``, default 22), ``data`` (comma-separated .npy shards;
default ``<data_dir>/part-000.npy``), ``data_dir`` (/datasets/bert/mxnet/wiki_128_npy_part_0),
``model`` (bert_12_768_12), ``lr`` (1e-4), ``mpi_export`` (extra env var names passed
with ``-x``), ``mpi_args`` (extra mpirun words), ``extra_args`` (extra script words),
``env`` (NAME: value set for mpirun and exported to every rank).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from typing import Iterable, Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._lines import FactCollector, fmt_list, parse_float, round2, split_lines, strip_tag
from dlperf_tasks.frameworks.base import Framework, LaunchSpec, NodeSpec
from dlperf_tasks.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window

_STEP = re.compile(r"\[step (\d+)\]")
_LATENCY = re.compile(r"latency=\s*(\S+?)\s*ms/batch")

#: environment variables every rank needs (DLPerf: -x NCCL_DEBUG -x LD_LIBRARY_PATH -x PATH)
MPI_EXPORTS = ("NCCL_DEBUG", "LD_LIBRARY_PATH", "PATH")


def build_mpirun(
    trial: Trial,
    nodes: list[NodeSpec],
    settings: Mapping,
    script_argv: list[str],
    env: dict[str, str],
) -> list[str]:
    """The ``mpirun`` argv shared by the MXNet workloads (Horovod over OpenMPI)."""
    topo = trial.cell.topology
    gpus = topo.gpus_per_node
    if topo.nodes == 1:
        hosts = f"localhost:{gpus}"
    else:
        hosts = ",".join(f"{n.address}:{gpus}" for n in nodes)
    ssh_port = L.integer(settings, "ssh_port", 22, 1, 65535)
    argv = [
        L.text(settings, "mpirun", "mpirun"),
        "--allow-run-as-root",
        "-np", str(topo.world_size),
        "-H", hosts,
        "-bind-to", "none",
        "-map-by", "slot",
    ]
    exports: list[str] = []
    for name in list(MPI_EXPORTS) + sorted(env) + L.env_names(settings, "mpi_export"):
        if name not in exports:
            exports.append(name)
    for name in exports:
        argv += ["-x", name]
    argv += [
        "-mca", "pml", "ob1",
        "-mca", "btl", "^openib",
        "-mca", "plm_rsh_args", f"-p {ssh_port} -q -o StrictHostKeyChecking=no",
    ]
    iface = nodes[0].interface if nodes else None
    if iface:
        argv += ["-mca", "btl_tcp_if_include", iface]
    argv += L.str_list(settings, "mpi_args")
    return argv + script_argv


class MxnetBert(Framework):
    name = "mxnet_bert"
    log_framework = "mxnet"
    log_model = "bert"
    log_prefix = "bert_base"
    launch_mode = "mpi"

    # ---- launching -------------------------------------------------------
    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        L.check_nodes(nodes, node_rank, cell.topology.nodes)
        if node_rank != 0:
            raise ValueError("mxnet_bert is launched by one mpirun on node 0 (launch_mode 'mpi')")
        settings = settings or {}
        bsz = cell.batch_size_per_device
        total_bz = bsz * cell.topology.world_size
        data_dir = L.text(settings, "data_dir", "/datasets/bert/mxnet/wiki_128_npy_part_0")
        data = L.text(settings, "data", data_dir.rstrip("/") + "/part-000.npy")
        dtype = "float16" if cell.precision == "amp" else "float32"
        script = [
            L.text(settings, "python", "python3"),
            L.text(settings, "script", "run_pretraining.py"),
            "--model", L.text(settings, "model", "bert_12_768_12"),
            "--dtype", dtype,
            "--warmup_ratio", "1",
            "--comm_backend", "horovod",
            "--total_batch_size", str(total_bz),
            "--total_batch_size_eval", str(total_bz),
            "--accumulate", "1",
            "--lr", L.text(settings, "lr", "1e-4"),
            "--max_seq_length", "128",
            "--max_predictions_per_seq", "20",
            "--num_steps", str(cell.window.total),
            "--log_interval", "1",
            "--ckpt_interval", "1000",
            "--data", data,
        ] + L.str_list(settings, "extra_args")
        env = L.env_from(settings, {"NCCL_DEBUG": "INFO"})
        argv = build_mpirun(trial, nodes, settings, script, env)
        return LaunchSpec(argv=argv, env=env, workdir=L.text(settings, "workdir", "/workspace/gluon-nlp/scripts/bert"))

    # ---- parsing ---------------------------------------------------------
    def parse(self, lines: Iterable[str]) -> ParsedLog:
        fc = FactCollector()
        samples: list[Sample] = []
        per_step: dict[int, int] = defaultdict(int)
        tagged = False
        for n, raw in enumerate(split_lines(lines), 1):
            fc.line(raw)
            rank, text = strip_tag(raw)
            if rank is not None:
                tagged = True
            if "throughput=" not in text or "[step " not in text:
                continue
            m = _STEP.search(text)
            lm = _LATENCY.search(text)
            if not m:
                fc.error(f"line {n}: iteration line without a step number: {text[:120]!r}")
                continue
            step = int(m.group(1))
            if not lm:
                fc.error(f"line {n}: step {step} line has no 'latency=... ms/batch': {text[:120]!r}")
                continue
            lat = parse_float(lm.group(1))
            if lat is None or lat <= 0:
                fc.error(f"line {n}: step {step} latency {lm.group(1)!r} is not a positive finite number")
                continue
            fc.iteration(step, rank)
            per_step[step] += 1
            samples.append(Sample(iteration=step, value=lat, unit="ms/iter", rank=rank))
        facts = fc.finish()
        return ParsedLog(samples=samples, facts=facts, extra={"lines_per_step": dict(per_step), "tagged": tagged})

    def expected_ranks(self, cell: Cell) -> list[int]:
        return list(range(cell.topology.world_size))

    def check(self, parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
        reasons: list[str] = []
        world = cell.topology.world_size
        per_step: dict[int, int] = defaultdict(int)
        for s in parsed.samples:
            per_step[s.iteration] += 1
        if not per_step:
            return ["no '[step N] ... latency=... ms/batch' line in the log"]
        need = list(range(1, window.total + 1))
        present = [i for i in need if per_step.get(i)]
        if len(present) < len(need):
            missing = [i for i in need if not per_step.get(i)]
            reasons.append(
                f"only {len(present)} of {window.total} iterations (last step seen {max(per_step)}; "
                f"missing steps {fmt_list(missing)})")
        # ranks: by tag when mpirun tagged the output, else by line count per step
        if parsed.facts.ranks_seen:
            for r in sorted(set(self.expected_ranks(cell)) - set(parsed.facts.ranks_seen))[:8]:
                reasons.append(f"rank {r} printed no iteration line")
        short = [(i, per_step[i]) for i in present if per_step[i] != world]
        if short:
            i, c = short[0]
            more = f" (and {len(short) - 1} more steps)" if len(short) > 1 else ""
            reasons.append(f"step {i} has {c} of {world} rank lines{more}")
        return reasons

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        world = cell.topology.world_size
        bsz = cell.batch_size_per_device
        speeds: dict[int, list[float]] = defaultdict(list)
        for s in parsed.samples:
            if window.warmup < s.iteration <= window.total:
                speeds[s.iteration].append(1000.0 / s.value * bsz * world)
        steps = range(window.warmup + 1, window.total + 1)
        missing = [i for i in steps if not speeds.get(i)]
        if missing:
            raise ValueError(f"mxnet_bert: steps {fmt_list(missing)} have no latency (run check() first)")
        rows = [statistics.median(speeds[i]) for i in steps]
        return TrialMetric(value=round2(sum(rows) / len(rows)))
