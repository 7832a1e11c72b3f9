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
from typing import Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._lines import StepSpan, parse_float, round2
from dlperf_tasks.frameworks._stream import LogStream, as_int
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.core.model import Cell, MetricKind, ParsedLog, Sample, Trial, TrialMetric, Window
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\)\s*:\s*([^\s|]+)\s*\|")  # the "|" proves the value is whole
_LM_LOSS = re.compile(r"\blm loss\s*:?\s*([^\s|]+)")  # 2020: 'lm loss 9.6E+00'; later 'lm loss: ...'
_SKIPPED = re.compile(r"number of skipped iterations\s*:\s*(\d+)")
_NAN_ITERS = re.compile(r"number of nan iterations\s*:\s*(\d+)")
_GRAD_NORM = re.compile(r"\bgrad norm\s*:\s*([^\s|]+)")
_TFLOPS = re.compile(r"\(TFLOP/s/GPU\)\s*:\s*([^\s|]+)")
_ARG = re.compile(r" ([a-z][a-z0-9_]*) \.{3,} ([^\n]*)")
_GBS = re.compile(r"global batch size:\s*(\d+)")
_MEM = re.compile(r"\[Rank (\d+)\]\s*\(after (\d+) iterations\)\s*memory \(MB\)")
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

    plausible_max_per_gpu = 1.0  # LATENCY: the floor, ms per iteration

    def latency_floor_ms(self, cell: Cell, facts=None) -> float | None:
        """The fastest one iteration could be: the GPT training FLOPs without recomputation
        (Narayanan et al. 2021, eq. 3 less its recompute pass and vocabulary term:
        ``72 B s l h^2 (1 + s/6h)``) on every GPU at :data:`PEAK_FLOPS_PER_GPU`. The model comes
        from the log's arguments block (what ran), else from the cell's layout where it states it
        (not 0). None when neither does."""
        lay = cell.layout
        args = getattr(facts, "args", None) or {}

        def pick(attr: str, arg: str) -> int:
            return as_int(args.get(arg)) or (getattr(lay, attr, 0) if lay is not None else 0) or 0

        b, s, n, h = (pick("global_batch", "global_batch_size"), pick("seq_length", "seq_length"),
                      pick("num_layers", "num_layers"), pick("hidden_size", "hidden_size"))
        if not (b and s and n and h):
            return None
        flops = 72.0 * b * s * n * h * h * (1.0 + s / (6.0 * h))
        return 1000.0 * flops / (max(cell.topology.world_size, 1) * PEAK_FLOPS_PER_GPU)

    def _measured(self, parsed: ParsedLog, window: Window) -> list[Sample]:
        if not parsed.samples:
            return []
        first = parsed.samples[0].iteration
        return [s for s in parsed.samples
                if s.iteration != first and window.warmup < s.iteration <= window.total]

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        if not parsed.samples:
            return ["no ' iteration N/M | ... elapsed time per iteration (ms): X |' line in the log "
                    "(Megatron prints it only in the last node's log)"]
        last = max(s.iteration for s in parsed.samples)
        reasons = layout_vs_args(parsed.facts, cell)
        if last < window.total:
            reasons.append(f"only {last} of {window.total} iterations (last iteration line at {last})")
        elif not self._measured(parsed, window):
            reasons.append(f"no iteration line after the first one inside the window "
                           f"{window.warmup + 1}..{window.total}")
        return reasons

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> TrialMetric:
        meas = self._measured(parsed, window)
        if not meas:
            raise ValueError("megatron_gpt: no iteration line inside the window (run check() first)")
        latency = sum(s.value for s in meas) / len(meas)
        gbs = cell.layout.global_batch if cell.layout else parsed.extra.get("global_batch_size")
        thr = round2(gbs * 1000.0 / latency) if gbs else None
        mem = parsed.extra.get("memory_mib")
        return TrialMetric(value=round2(latency), kind=MetricKind.LATENCY, memory_mib=mem, throughput=thr,
                           memory_source=MEMORY_SOURCE if mem is not None else None,
                           details={"final_loss": parsed.facts.final_loss} if parsed.facts.final_loss is not None else {})


#: a per-GPU peak no GPU reaches at any precision (B300: ~15 PFLOP/s dense FP4; H100: ~1 PFLOP/s
#: dense BF16): a Megatron iteration faster than its FLOPs at this rate is a broken log
PEAK_FLOPS_PER_GPU = 20e15
#: what ``memory_mib`` is: never nvidia-smi's figure (seed 002's column is ~670 MiB higher: CUDA context)
MEMORY_SOURCE = ("log: max reserved (MB), torch caching allocator peak from the '[Rank N] memory (MB)' line; "
                 "not nvidia-smi memory.used (which adds the CUDA context)")
#: Megatron argument name -> (ParallelLayout attribute, label)
_LAYOUT_ARGS = {"micro_batch_size": ("micro_batch", "micro batch"), "global_batch_size": ("global_batch", "global batch"),
                "data_parallel_size": ("dp", "data-parallel size"),
                "tensor_model_parallel_size": ("mp", "tensor-parallel size"),
                "pipeline_model_parallel_size": ("pp", "pipeline-parallel size"),
                "num_layers": ("num_layers", "layers"), "hidden_size": ("hidden_size", "hidden size"),
                "num_attention_heads": ("num_heads", "attention heads")}


def layout_vs_args(facts, cell: Cell) -> list[str]:
    """Reasons where the log's arguments block disagrees with the cell's parallel layout."""
    out = []
    lay = cell.layout
    if lay is None:
        return out
    for arg, (attr, label) in _LAYOUT_ARGS.items():
        v = as_int(facts.args.get(arg))
        if not getattr(lay, attr):  # the file name did not state it (0): the arguments block does
            continue
        if v is not None and v != getattr(lay, attr):
            out.append(f"log's {label} is {v} (arguments block: {arg}), the cell's ({lay.case}) is "
                       f"{getattr(lay, attr)}")
    w = as_int(facts.args.get("world_size"))
    if w is not None and w != cell.topology.world_size:
        out.append(f"log's world size is {w} (arguments block), the cell's is {cell.topology.world_size} "
                   f"({cell.topology.name})")
    return out


class MegatronStream(LogStream):
    """Megatron-LM log: arguments block, iteration lines (last rank), memory lines (rank 0)."""

    def __init__(self, max_lines: int | None = None) -> None:
        super().__init__(max_lines=max_lines)
        self.memory: dict[str, float] = {}
        self.extra["memory_mb"] = self.memory

    def scan(self, block: str) -> None:
        if "......" in block:
            for m in _ARG.finditer(block):
                self.fc.facts.args[m.group(1)] = m.group(2).strip()
                self.fc.facts.args_source = "Megatron arguments block"
        if "memory (MB)" in block:
            for start, line in self.lines_with(block, "memory (MB)"):
                self._memory(block, start, line)
        if "elapsed time per iteration" in block:
            for start, line in self.lines_with(block, "elapsed time per iteration"):
                self._iteration(block, start, line)

    def _memory(self, block: str, start: int, text: str) -> None:
        mm = _MEM.search(text)
        if not mm:
            return
        self.fc.rank(int(mm.group(1)))
        for key, rx in _MEM_FIELDS.items():
            fm = rx.search(text)
            v = parse_float(fm.group(1)) if fm else None
            if v is None or v < 0:
                self.fc.error(f"line {self.line_no(block, start)}: memory field {key!r} missing or not a number")
                continue
            self.memory[key] = max(self.memory.get(key, 0.0), v)

    def _iteration(self, block: str, start: int, text: str) -> None:
        im = _ITER.search(text)
        em = _ELAPSED.search(text)
        if not im or not em:
            self.fc.error(f"line {self.line_no(block, start)}: unreadable iteration line: {text[:120]!r}")
            return
        it = int(im.group(1))
        v = parse_float(em.group(1))
        if v is None or v <= 0:
            self.fc.error(f"line {self.line_no(block, start)}: iteration {it} elapsed time {em.group(1)!r} "
                          "is not a positive finite number")
            return
        gm = _GBS.search(text)
        if gm:
            self.extra["global_batch_size"] = int(gm.group(1))
        sm = _SKIPPED.search(text)
        if sm and int(sm.group(1)):  # fp16 loss-scale overflow: the step ran (time, data) but was not applied
            skipped = self.extra.setdefault("skipped_iterations", {})
            skipped[it] = int(sm.group(1))
        nm = _NAN_ITERS.search(text)
        if nm and int(nm.group(1)):
            self.nonfinite_loss(it, "number of nan iterations", nm.group(1))
        gn = _GRAD_NORM.search(text)
        if gn and parse_float(gn.group(1)) is None:  # the gate refuses one inside the window
            self.extra.setdefault("nonfinite_grad_norms", []).append(it)
        tm = _TFLOPS.search(text)
        if tm:
            self.extra.setdefault("tflops_per_gpu", {})[it] = parse_float(tm.group(1))
        loss = None
        lm = _LM_LOSS.search(text)
        if lm:
            loss = self.loss(it, "lm loss", lm.group(1))
            self.fc.facts.final_loss = loss
        self.add(Sample(iteration=it, value=v, unit="ms/iter", rank=self.rank_at(block, start), loss=loss))

    def finish(self) -> None:
        f = self.fc.facts
        if "max_reserved" in self.memory:
            self.extra["memory_mib"] = self.memory["max_reserved"]
        a = f.args
        f.world_size = as_int(a.get("world_size"))
        f.batch_per_device = as_int(a.get("micro_batch_size"))
        f.global_batch = as_int(a.get("global_batch_size"))
        f.stride = as_int(a.get("log_interval")) or f.stride
        mbs, gbs, dp = f.batch_per_device, f.global_batch, as_int(a.get("data_parallel_size"))
        if mbs and gbs and dp:
            f.accumulation = gbs // (mbs * dp)


MegatronGpt.Stream = MegatronStream
