"""Megatron-LM GPT (NVIDIA/Megatron-LM @ 8aa4619 ``pretrain_gpt.py``, seed 002).

Log lines (``--log-interval 10``)::

     iteration       20/     130 | consumed samples: 40 | elapsed time per iteration (ms): 464.3 | ... |
    [Rank 0] (after 20 iterations) memory (MB) | allocated: 3122.5 | max allocated: 12234.8 | reserved: 13694.0 | max reserved: 13694.0

The iteration line comes from the **last** global rank, so in multi-node runs it is
only in the last node's log (:meth:`metrics_nodes`); the memory line comes from rank 0
(node 0's log) in pure data-parallel runs. To get both, parse the two logs as one
stream: ``parse(itertools.chain(node0_lines, last_node_lines))``.

Rule (DLPerf published no extractor; fixture README): metric_kind LATENCY =
mean of ``elapsed time per iteration (ms)`` over the log lines whose interval lies in
the window, i.e. lines with ``warmup < iteration <= warmup+measure``; the first log
line (it includes start-up) is always dropped. ``Window(warmup=10, measure=120)`` with
130 iterations reproduces "mean without the first line" (464.12 ms / 664.22 ms on the
fixtures); rounded to 2 decimals like the seed table. ``throughput`` = global batch /
latency. ``memory_mib`` = the largest ``max reserved`` (MB) of the memory lines: the
caching allocator's peak, the number closest to the seed's nvidia-smi column (seed
14362 MiB for DP_1x1x1 vs. 13694 max reserved + ~670 MiB CUDA context in the fixture);
all four memory values are kept in ``ParsedLog.extra["memory_mb"]``.

Log files (one per node, DLPerf's name; the trial index is a directory level):
``logs/megatron/gpt/<case>/<N>n<G>g/<trial>/megatron_lm_perf_<N>n<G>g_dp.._mp.._pp.._mbs.._gbs.._l.._hsz.._ahs.._pretrain_<node>.log``

Launcher settings: ``workdir`` (/workspace/Megatron-LM), ``script`` (pretrain_gpt.py),
``python`` (python3), ``master_port`` (21327), ``data_path``
(/data/gpt/gpt_sample_dataset_text_document), ``vocab_file``/``merge_file``
(<workdir>/gpt2-vocab.json, gpt2-merges.txt), ``checkpoint_path`` (/data/perf_output),
``log_interval`` (10), ``extra_args``, ``env``.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._lines import FactCollector, parse_float, round2, split_lines, strip_tag
from dlperf_tasks.frameworks.base import Framework, LaunchSpec, NodeSpec
from dlperf_tasks.model import Cell, MetricKind, ParsedLog, Sample, Trial, TrialMetric, Window

_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*(\S+?)\s*\|")
_GBS = re.compile(r"global batch size:\s*(\d+)")
_MEM = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\)")
_MEM_FIELDS = {
    "allocated": re.compile(r"\|\s*allocated:\s*(\S+)"),
    "max_allocated": re.compile(r"\|\s*max allocated:\s*(\S+)"),
    "reserved": re.compile(r"\|\s*reserved:\s*(\S+)"),
    "max_reserved": re.compile(r"\|\s*max reserved:\s*(\S+)"),
}


class MegatronGpt(Framework):
    name = "megatron_gpt"
    log_framework = "megatron"
    log_model = "gpt"
    log_prefix = "megatron_lm_perf"
    metric_kind = MetricKind.LATENCY
    launch_mode = "per_node"

    @staticmethod
    def _layout(cell: Cell):
        if cell.layout is None:
            raise ValueError(f"cell {cell.id} has no parallel layout (Megatron cells need one)")
        lay = cell.layout
        if lay.dp * lay.mp * lay.pp != cell.topology.world_size:
            raise ValueError(f"cell {cell.id}: DP*MP*PP = {lay.dp}*{lay.mp}*{lay.pp} "
                             f"!= {cell.topology.world_size} GPUs")
        return lay

    # ---- launching -------------------------------------------------------
    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        topo = cell.topology
        L.check_nodes(nodes, node_rank, topo.nodes)
        lay = self._layout(cell)
        settings = settings or {}
        workdir = L.text(settings, "workdir", "/workspace/Megatron-LM").rstrip("/") or "/"
        port = L.integer(settings, "master_port", 21327, 1, 65535)
        ckpt = L.text(settings, "checkpoint_path", "/data/perf_output")
        argv = [
            L.text(settings, "python", "python3"), "-m", "torch.distributed.launch",
            "--nproc_per_node", str(topo.gpus_per_node),
            "--nnodes", str(topo.nodes),
            "--node_rank", str(node_rank),
            "--master_addr", nodes[0].address,
            "--master_port", str(port),
            L.text(settings, "script", "pretrain_gpt.py"),
            "--tensor-model-parallel-size", str(lay.mp),
            "--pipeline-model-parallel-size", str(lay.pp),
            "--num-layers", str(lay.num_layers),
            "--hidden-size", str(lay.hidden_size),
            "--num-attention-heads", str(lay.num_heads),
            "--micro-batch-size", str(lay.micro_batch),
            "--global-batch-size", str(lay.global_batch),
            "--seq-length", str(lay.seq_length),
            "--max-position-embeddings", str(lay.seq_length),
            "--train-iters", str(cell.window.total),
            "--lr-decay-iters", "320000",
            "--save", ckpt,
            "--load", ckpt,
            "--data-path", L.text(settings, "data_path", "/data/gpt/gpt_sample_dataset_text_document"),
            "--vocab-file", L.text(settings, "vocab_file", workdir + "/gpt2-vocab.json"),
            "--merge-file", L.text(settings, "merge_file", workdir + "/gpt2-merges.txt"),
            "--data-impl", "mmap",
            "--split", "949,50,1",
            "--distributed-backend", "nccl",
            "--lr", "0.00015",
            "--min-lr", "1.0e-5",
            "--lr-decay-style", "cosine",
            "--weight-decay", "1e-2",
            "--clip-grad", "1.0",
            "--lr-warmup-fraction", ".01",
            "--checkpoint-activations",
            "--log-interval", str(L.integer(settings, "log_interval", 10)),
            "--save-interval", "100000",
            "--eval-interval", "10000",
            "--eval-iters", "10",
            "--fp16",
        ] + L.str_list(settings, "extra_args")
        env = {
            "NODE_RANK": str(node_rank),
            "MASTER_ADDR": nodes[0].address,
            "MASTER_PORT": str(port),
            "NNODES": str(topo.nodes),
            "GPUS_PER_NODE": str(topo.gpus_per_node),
            "NCCL_DEBUG": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
        if nodes[node_rank].interface:
            env["NCCL_SOCKET_IFNAME"] = nodes[node_rank].interface
        return LaunchSpec(argv=argv, env=L.env_from(settings, env), workdir=workdir)

    # ---- logs ------------------------------------------------------------
    def log_relpath(self, trial: Trial, node_rank: int = 0) -> str:
        c = trial.cell
        t = c.topology
        lay = self._layout(c)
        return (f"logs/{self.log_framework}/{self.log_model}/{lay.case}/{t.name}/{trial.index}/"
                f"megatron_lm_perf_{t.name}_dp{lay.dp}_mp{lay.mp}_pp{lay.pp}_mbs{lay.micro_batch}"
                f"_gbs{lay.global_batch}_l{lay.num_layers}_hsz{lay.hidden_size}_ahs{lay.num_heads}"
                f"_pretrain_{node_rank}.log")

    def metrics_nodes(self, cell: Cell) -> list[int]:
        return [cell.topology.nodes - 1]

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        fc = FactCollector()
        samples: list[Sample] = []
        memory: dict[str, float] = {}
        gbs: int | None = None
        for n, raw in enumerate(split_lines(lines), 1):
            fc.line(raw)
            rank, text = strip_tag(raw)
            if "memory (MB)" in text:
                mm = _MEM.search(text)
                if mm:
                    fc.rank(int(mm.group(1)))
                    for key, rx in _MEM_FIELDS.items():
                        fm = rx.search(text)
                        v = parse_float(fm.group(1)) if fm else None
                        if v is None or v < 0:
                            fc.error(f"line {n}: memory field {key!r} missing or not a number")
                            continue
                        memory[key] = max(memory.get(key, 0.0), v)
                continue
            if "elapsed time per iteration" not in text:
                continue
            im = _ITER.search(text)
            em = _ELAPSED.search(text)
            if not im or not em:
                fc.error(f"line {n}: unreadable iteration line: {text[:120]!r}")
                continue
            it = int(im.group(1))
            v = parse_float(em.group(1))
            if v is None or v <= 0:
                fc.error(f"line {n}: iteration {it} elapsed time {em.group(1)!r} is not a positive finite number")
                continue
            gm = _GBS.search(text)
            if gm:
                gbs = int(gm.group(1))
            fc.iteration(it, rank)
            samples.append(Sample(iteration=it, value=v, unit="ms/iter", rank=rank))
        extra: dict = {"memory_mb": memory}
        if "max_reserved" in memory:
            extra["memory_mib"] = memory["max_reserved"]
        if gbs is not None:
            extra["global_batch_size"] = gbs
        return ParsedLog(samples=samples, facts=fc.finish(), extra=extra)

    def _measured(self, parsed: ParsedLog, window: Window) -> list[Sample]:
        if not parsed.samples:
            return []
        first = parsed.samples[0].iteration
        return [s for s in parsed.samples
                if s.iteration != first and window.warmup < s.iteration <= window.total]

    def check(self, parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
        if not parsed.samples:
            return ["no ' iteration N/M | ... elapsed time per iteration (ms): X |' line in the log "
                    "(Megatron prints it only in the last node's log)"]
        last = max(s.iteration for s in parsed.samples)
        reasons = []
        if last < window.total:
            reasons.append(f"only {last} of {window.total} iterations (last iteration line at {last})")
        elif not self._measured(parsed, window):
            reasons.append(f"no iteration line after the first one inside the window "
                           f"{window.warmup + 1}..{window.total}")
        return reasons

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        meas = self._measured(parsed, window)
        if not meas:
            raise ValueError("megatron_gpt: no iteration line inside the window (run check() first)")
        latency = sum(s.value for s in meas) / len(meas)
        gbs = cell.layout.global_batch if cell.layout else parsed.extra.get("global_batch_size")
        thr = round2(gbs * 1000.0 / latency) if gbs else None
        return TrialMetric(value=round2(latency), kind=MetricKind.LATENCY,
                           memory_mib=parsed.extra.get("memory_mib"), throughput=thr)
