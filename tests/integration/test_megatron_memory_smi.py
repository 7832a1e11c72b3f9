"""Seed 002's memory column is nvidia-smi's per-GPU MiB. A Megatron sweep on the
simulated cluster (real sshd nodes, dockerd, registry, the stand-in trainer image; only the GPUs are
simulated by the STAND-IN nvidia-smi, docker/standin/rootfs/usr/local/bin/nvidia-smi) reports the
telemetry's per-GPU peak as the memory figure and the log's allocator figure (Megatron's
``max reserved``) beside it, each labelled, in result.json, report.md and the DLPerf-style text."""

from __future__ import annotations

import json

import pytest

from dlperf_tasks.report.markdown import render_dlperf_text
from tests.integration.test_standin_strict_cluster import suite_file, sweep
from tests.integration.test_telemetry_engine import gpu_scenario

pytestmark = pytest.mark.cluster
SMI_MIB = 14362  # seed 002's DP_1x1x1 figure (nvidia-smi)
ALLOC_MB = 13694.0  # the fixture's max reserved: the allocator's peak, without the CUDA context


def test_megatron_memory_is_nvidia_smi_peak_with_the_allocator_beside_it(sim_cluster_env, monkeypatch, tmp_path):
    sim = sim_cluster_env
    mg = suite_file(tmp_path, "megatron-gpt", "smimem", {"DLPERF_STANDIN_LATENCY_MS": "464.12",
                                                          "DLPERF_STANDIN_MEMORY_MB": str(ALLOC_MB)})
    with gpu_scenario(sim, monkeypatch,
                      lambda _: {"count": 8, "default": {"memory_used": SMI_MIB, "util": 95, "power": 280.0}}):
        res = sweep(sim, mg, {"cases": "DP_1x1x1_2_1536x16"}, tmp_path)
    assert [t.status.value for t in res.all] == ["OK"], [(t.trial.id, t.reason) for t in res.all]
    (cell,) = res.result["cells"]
    assert cell["gpu_memory_mib"] == SMI_MIB and cell["memory_mib"] == ALLOC_MB, cell
    on_disk = json.loads((res.out_dir / "result.json").read_text())["cells"][0]
    assert (on_disk["gpu_memory_mib"], on_disk["memory_mib"]) == (SMI_MIB, ALLOC_MB)
    md = (res.out_dir / "report.md").read_text()
    assert "group | case | latency | memory (nvidia-smi) | allocator (log)" in md
    assert f" -- | DP_1x1x1_2_1536x16 | 464.12 (ms) | {SMI_MIB} (MiB) | {ALLOC_MB:.0f} (MiB)" in md
    assert "memory (nvidia-smi): the largest per-GPU `memory.used`" in md
    text = render_dlperf_text(res.result)
    assert f"DP_1x1x1_2_1536x16: latency 464.12 ms, memory {SMI_MIB} MiB (nvidia-smi), allocator 13694 MiB" in text
