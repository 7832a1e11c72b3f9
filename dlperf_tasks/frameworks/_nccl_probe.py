"""The interconnect probe as a launchable program: nccl-tests ``all_reduce_perf`` over ``mpirun``.

NVIDIA/nccl-tests' README (commit a0b82b2260cf5152b9f8c061bbf7eaf0ba096432) runs it multi-node as
one MPI process per GPU: ``mpirun -np 64 -N 8 ./build/all_reduce_perf -b 8 -e 8G -f 2 -g 1``
(binaries built with ``MPI=1``). The probe builds the same command with the MXNet suites' ``mpirun``
(``mxnet_bert.build_mpirun``: ``-np <world size> -H host:gpus,...``, ``-x NCCL_DEBUG`` and the
suite's environment exported, ranks on the other nodes started through the helper containers'
sshd), with ``NCCL_DEBUG=INFO`` so NCCL names the transport it chose (``via NET/IB/0`` or
``via NET/Socket/0``, NCCL ``src/transport/net.cc``).

Settings (the suite's or cluster file's ``interconnect_probe`` mapping, docs/interconnect-probe.md):
``binary`` (``all_reduce_perf``; NGC PyTorch images ship ``/usr/local/bin/all_reduce_perf_mpi``),
``min_bytes`` (8), ``max_bytes`` (8G), ``step_factor`` (2), ``extra_args``, ``mpirun``, ``mpi_args``,
``env``. The log is read whole by ``_nccl_tests_log.parse_text``; a probe trial has no speed samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Mapping

from dlperf_tasks.core.model import Cell, ParsedLog, Trial, TrialMetric, Window
from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec
from dlperf_tasks.frameworks.mxnet_bert import build_mpirun

_SIZE_CHARS = set("0123456789.KMGkmg")


def _size(settings: Mapping, key: str, default: str) -> str:
    value = str(settings.get(key, default)).strip()
    if not value or not set(value) <= _SIZE_CHARS:
        raise ValueError(f"interconnect_probe.{key} = {value!r} is not a size (a number, optionally K, M or G)")
    return value


#: probe settings that go to the launch (the others are the verdict's: measure/interconnect.py)
LAUNCH_KEYS = ("binary", "min_bytes", "max_bytes", "step_factor", "extra_args", "env", "mpirun", "mpi_args",
               "mpi_export", "workdir")


def probe_launcher(suite_launcher: Mapping | None, cfg: Mapping) -> dict:
    """The probe's launch settings: the suite's ``mpirun`` settings, then the probe's own."""
    out = {k: v for k, v in (suite_launcher or {}).items() if k in ("mpirun", "mpi_args", "mpi_export")}
    out.update({k: cfg[k] for k in LAUNCH_KEYS if k in cfg})
    return out


def probe_argv(settings: Mapping) -> list[str]:
    """``all_reduce_perf -b MIN -e MAX -f FACTOR -g 1`` (one GPU per MPI process) plus ``extra_args``."""
    factor = L.integer(settings, "step_factor", 2, 2, 1024)
    return [L.text(settings, "binary", "all_reduce_perf"), "-b", _size(settings, "min_bytes", "8"),
            "-e", _size(settings, "max_bytes", "8G"), "-f", str(factor), "-g", "1",
            *L.str_list(settings, "extra_args")]


class NcclProbe(Framework):
    name = "nccl_probe"
    log_framework = "nccl_tests"
    log_model = "all_reduce_perf"
    log_prefix = "all_reduce_perf"
    launch_mode = "mpi"

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        L.check_nodes(nodes, node_rank, trial.cell.topology.nodes)
        if node_rank != 0:
            raise ValueError("the interconnect probe is launched by one mpirun on node 0")
        settings = settings or {}
        env = L.env_from(settings, {"NCCL_DEBUG": "INFO"})
        argv = build_mpirun(trial, nodes, settings, probe_argv(settings), env)
        return LaunchSpec(argv=argv, env=env, workdir=L.text(settings, "workdir", "/tmp"))

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        return ParsedLog()  # no speed samples: the probe's log is read whole after the run

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        raise ValueError("the interconnect probe has no speed metric")
