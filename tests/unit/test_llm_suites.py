"""The LLM suites (Megatron-Bridge, torchtitan): catalog fields, digest pins, launch commands
against the pinned entry points' flags, the interconnect probe's verdict."""

from __future__ import annotations

import pytest
import yaml

from dlperf_tasks.catalog.loader import BUILTIN_DIR, load_suite
from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import CatalogError, RemoteError
from dlperf_tasks.frameworks import get, preflight
from dlperf_tasks.frameworks.argcheck import ENTRY_POINTS
from dlperf_tasks.frameworks.launchspec import NodeSpec
from dlperf_tasks.measure.interconnect import bus_bandwidth, judge, nccl_transport
from dlperf_tasks.remote.runtime import DockerRuntime

LLM_SUITES = ("llama31-8b-megatron-bridge", "llama31-70b-megatron-bridge", "llama31-8b-torchtitan")
DIGEST = "sha256:" + "ab" * 32


def _nodes(n):
    return [NodeSpec(f"node{i + 1}", f"10.11.0.{i + 2}", 8) for i in range(n)]


@pytest.mark.parametrize("suite_id", LLM_SUITES)
def test_every_cell_launches_with_only_upstream_flags(suite_id):
    suite = load_suite(suite_id)
    p = plan(suite, {"trials": 1})
    fw = get(suite.framework)
    assert {c.precision for c in p.cells} == {"bf16", "fp8"}
    for t in p.trials:
        cell = t.trial.cell
        for rank in range(cell.topology.nodes):
            spec = fw.checked_launch(t.trial, rank, _nodes(cell.topology.nodes), suite.launcher)  # raises if refused
            assert preflight.check(suite.framework, cell, spec.argv, suite.launcher) == []


def test_megatron_bridge_command_carries_the_cells_layout_and_dtype():
    suite = load_suite("llama31-70b-megatron-bridge")
    t = next(t.trial for t in plan(suite, {"trials": 1}).trials
             if t.trial.cell.layout.case == "tp4_pp2_cp2_vp5" and t.trial.cell.precision == "fp8")
    argv = get("megatron_bridge").launch(t, 0, _nodes(4), suite.launcher).argv
    words = argv[argv.index("scripts/performance/run_script.py"):]
    pairs = dict(zip(words[1::2], words[2::2]))
    assert (pairs["-tp"], pairs["-pp"], pairs["-cp"], pairs["-vp"], pairs["-c"], pairs["-mr"]) == \
        ("4", "2", "2", "5", "fp8_cs", "llama3_70b")


def test_unknown_flags_are_refused_naming_the_upstream_commit():
    for suite_id, bad in (("llama31-8b-torchtitan", "--training.stepz"), ("llama31-8b-megatron-bridge", "--tensor-parallel")):
        suite = load_suite(suite_id)
        t = plan(suite, {"trials": 1}).trials[0].trial
        settings = {**suite.launcher, "extra_args": [bad, "2"]}
        with pytest.raises(ValueError) as exc:
            get(suite.framework).checked_launch(t, 0, _nodes(t.cell.topology.nodes), settings)
        msg = str(exc.value)
        assert bad in msg and ENTRY_POINTS[suite.framework]["source"].split(":", 1)[0] in msg and "\n" not in msg


def test_torchtitan_compile_only_in_compiled_layouts():
    suite = load_suite("llama31-8b-torchtitan")
    for t in plan(suite, {"trials": 1, "precisions": ["bf16"]}).trials:
        argv = get("torchtitan_llama").launch(t.trial, 0, _nodes(t.trial.cell.topology.nodes), suite.launcher).argv
        assert ("--compile.enable" in argv) == (t.trial.cell.layout.group != "fsdp")
        assert argv[argv.index("--config") + 1] == "llama3_8b"


def test_catalog_check_lists_suites_without_a_digest(tmp_path, capsys):
    data = yaml.safe_load((BUILTIN_DIR / "llama31-8b-torchtitan.yaml").read_text())
    pinned = tmp_path / "pinned.yaml"
    data["id"] = "pinned"
    data["container"]["digest"] = DIGEST
    pinned.write_text(yaml.safe_dump(data))
    assert main(["catalog", "check", str(pinned), str(BUILTIN_DIR / "llama31-8b-torchtitan.yaml")]) == 0
    out = capsys.readouterr().out
    unpinned = [line for line in out.splitlines() if line.startswith("no digest:")]
    assert len(unpinned) == 1 and "llama31-8b-torchtitan" in unpinned[0]
    assert main(["catalog", "check"]) == 0  # the whole catalog
    listed = {line.split()[2].rstrip(":") for line in capsys.readouterr().out.splitlines() if line.startswith("no digest:")}
    assert set(LLM_SUITES) <= listed


def test_a_malformed_digest_is_one_line_naming_the_field(tmp_path):
    data = yaml.safe_load((BUILTIN_DIR / "llama31-8b-megatron-bridge.yaml").read_text())
    data["container"]["digest"] = "sha256:XYZ"
    p = tmp_path / "llama31-8b-megatron-bridge.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError) as exc:
        load_suite(str(p))
    line = next(ln for ln in str(exc.value).splitlines() if "digest" in ln)
    assert "container.digest" in line and "sha256:XYZ" in line


def test_pinned_image_is_pulled_by_digest_and_another_digest_refuses_the_trial():
    spec = ContainerSpec(image="nvcr.io/nvidia/nemo:26.04", digest=DIGEST)
    rt = DockerRuntime(spec)
    assert rt.image == f"nvcr.io/nvidia/nemo:26.04@{DIGEST}"  # docker pulls the digest; the tag stays for readers
    rt.check_pinned("n1", f"nvcr.io/nvidia/nemo@{DIGEST}")  # the same digest: accepted
    other = "sha256:" + "cd" * 32
    with pytest.raises(RemoteError, match=r"node n2: .* has digest sha256:cdcd.*pins sha256:abab.*refused"):
        rt.check_pinned("n2", f"nvcr.io/nvidia/nemo@{other}")
    with pytest.raises(RemoteError, match="(none)"):
        rt.check_pinned("n3", None)
    DockerRuntime(ContainerSpec(image="nvcr.io/nvidia/nemo:26.04")).check_pinned("n1", None)  # no pin: no check


def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n():
    assert bus_bandwidth(100.0, 16) == pytest.approx(187.5)
    assert bus_bandwidth(50.0, 2) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        bus_bandwidth(1.0, 0)


# NCCL INFO lines in NCCL's own wording (channel and transport lines as NCCL 2.x prints them)
IB_LINES = ["node1:123:456 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
            "node1:123:456 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0",
            "node1:123:456 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC"]
SOCKET_LINES = ["node1:123:456 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
                "node1:123:456 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0"]


def test_probe_flags_socket_fallback_and_low_bus_bandwidth():
    assert nccl_transport(IB_LINES) == "IB"
    assert nccl_transport(SOCKET_LINES) == "Socket"
    assert nccl_transport(["no nccl here"]) is None
    rows = [(8 << 20, 20.0), (1 << 30, 200.0)]  # 200 GB/s algbw at 1 GiB over 16 ranks: 375 GB/s busbw
    good = judge(16, rows, "IB", expected_busbw_gbs=400.0, min_fraction=0.8)
    assert good.flags == [] and good.busbw_gbs == pytest.approx(375.0)
    slow = judge(16, rows, "IB", expected_busbw_gbs=500.0, min_fraction=0.8)
    assert len(slow.flags) == 1 and "375.0 GB/s is below 80% of the expected 500.0" in slow.flags[0]
    sock = judge(16, rows, "Socket", expected_busbw_gbs=None)
    assert len(sock.flags) == 1 and "sockets" in sock.flags[0]
    assert judge(16, [], "IB", expected_busbw_gbs=400.0).flags
    assert sock.to_dict()["sizes"][1]["busbw_gbs"] == pytest.approx(375.0)
