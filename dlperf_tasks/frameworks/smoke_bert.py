"""Smoke BERT: the small real PyTorch trainer in ``dlperf_tasks/smoke/train_bert.py``.

It proves the whole pipeline (plan, launch, logs, parse, statistics, report, publish) on
any machine, CPU only included. One ``torchrun`` per node (launch mode ``per_node``);
rank 0 prints one line per iteration with the job's samples/s, every rank prints a final
line (format documented in ``train_bert.py``).

Launcher settings (suite YAML ``launcher:``), all optional:
``python`` (interpreter, default ``python3``; the local cluster passes its own),
``script`` (trainer path; default: the packaged train_bert.py),
``master_port`` (default 29500), ``device`` (auto|cpu|cuda), ``config`` (auto|tiny|base),
``seq_len`` (int), ``extra_args`` (list), ``workdir``.

Speed rule (DLPerf's): drop the ``warmup`` first iterations, average samples/s over the
next ``measure`` iterations.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Iterable, Mapping

from dlperf_tasks.frameworks._lines import StepSpan
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.core.model import Cell, LogFacts, MetricKind, ParsedLog, Sample, Trial, TrialMetric, Window
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

SCRIPT = str(Path(__file__).resolve().parent.parent / "smoke" / "train_bert.py")

_ITER_RE = re.compile(
    r"\[smoke-bert\] iteration=(?P<it>\d+) samples_per_sec=(?P<sps>\S+) loss=(?P<loss>\S+) time=(?P<ts>\S+)"
)
_FINAL_RE = re.compile(r"\[smoke-bert\] final rank=(?P<rank>\d+) world_size=(?P<world>\d+) iterations=(?P<its>\d+)")
_CONFIG_RE = re.compile(r"\[smoke-bert\] config (?P<kv>.*)")
_CRASH = ("Traceback (most recent call last)", "ChildFailedError", "Killed", "NCCL error", "[smoke-bert] error:")


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class SmokeBert(Framework):
    name = "smoke_bert"
    log_framework = "smoke"
    log_model = "bert"
    log_prefix = "bert"
    metric_kind = MetricKind.THROUGHPUT
    launch_mode = "per_node"

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        topo = cell.topology
        if not 0 <= node_rank < topo.nodes or len(nodes) < topo.nodes:
            raise ValueError(f"node_rank {node_rank} / {len(nodes)} nodes do not fit topology {topo.name}")
        argv = [
            str(settings.get("python", "python3")), "-m", "torch.distributed.run",
            f"--nnodes={topo.nodes}", f"--nproc_per_node={topo.gpus_per_node}", f"--node_rank={node_rank}",
            f"--master_addr={nodes[0].address}", f"--master_port={int(settings.get('master_port', 29500))}",
            str(settings.get("script") or SCRIPT),
            "--batch-size", str(cell.batch_size_per_device),
            "--iterations", str(cell.window.total),
            "--precision", cell.precision,
            "--device", str(settings.get("device", "auto")),
            "--config", str(settings.get("config", "auto")),
            "--seed", str(1000 + trial.index),
        ]
        if settings.get("seq_len"):
            argv += ["--seq-len", str(int(settings["seq_len"]))]
        argv += [str(a) for a in settings.get("extra_args") or []]
        env = {"OMP_NUM_THREADS": str(settings.get("omp_threads", 1)), "PYTHONUNBUFFERED": "1"}
        iface = nodes[node_rank].interface
        if iface:
            env["NCCL_SOCKET_IFNAME"] = iface
            env["GLOO_SOCKET_IFNAME"] = iface
        return LaunchSpec(argv=argv, env=env, workdir=settings.get("workdir"))

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        parsed = ParsedLog()
        facts: LogFacts = parsed.facts
        iters: set[int] = set()
        finals: dict[int, int] = {}
        for raw in lines:
            # ranks share one log: split glued lines at every marker as well as at \r / \n
            for line in str(raw).replace("\r", "\n").replace("[smoke-bert]", "\n[smoke-bert]").split("\n"):
                if not line:
                    continue
                facts.lines += 1
                for marker in _CRASH:
                    if marker in line and marker not in facts.crash_markers:
                        facts.crash_markers.append(marker)
                m = _ITER_RE.search(line)
                if m:
                    it, sps, ts = int(m["it"]), _num(m["sps"]), _num(m["ts"])
                    if sps is None or ts is None:
                        facts.errors.append(f"non-numeric value in line: {line.strip()[:120]}")
                        continue
                    iters.add(it)
                    parsed.samples.append(Sample(iteration=it, value=sps, unit="samples/s", rank=0, timestamp=ts))
                    continue
                m = _FINAL_RE.search(line)
                if m:
                    finals[int(m["rank"])] = int(m["its"])
                    parsed.extra["world_size"] = int(m["world"])
                    continue
                m = _CONFIG_RE.search(line)
                if m:
                    parsed.extra["config"] = dict(kv.split("=", 1) for kv in m["kv"].split() if "=" in kv)
        facts.iterations_seen = sorted(iters)
        facts.ranks_seen = [0] if iters else []
        parsed.extra["ranks_finished"] = sorted(finals)
        return parsed

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        reasons = []
        world = cell.topology.world_size
        missing = sorted(set(range(world)) - set(parsed.extra.get("ranks_finished", [])))
        if missing:
            reasons.append(f"ranks without a final line: {missing}")
        need = set(range(window.warmup + 1, window.total + 1))
        lacking = need - set(parsed.facts.iterations_seen)
        if lacking:
            reasons.append(f"{len(lacking)} of iterations {window.warmup + 1}..{window.total} missing")
        bad = [s.iteration for s in parsed.samples if not (s.value > 0 and s.value < float("inf"))]
        if bad:
            reasons.append(f"non-positive or infinite speed at iterations {bad[:5]}")
        return reasons

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> TrialMetric:
        by_it = {s.iteration: s.value for s in parsed.samples}
        values = [by_it[i] for i in range(window.warmup + 1, window.total + 1) if i in by_it]
        if not values:
            raise ValueError(f"no samples in iterations {window.warmup + 1}..{window.total}")
        return TrialMetric(value=statistics.fmean(values), kind=MetricKind.THROUGHPUT, throughput=statistics.fmean(values))
