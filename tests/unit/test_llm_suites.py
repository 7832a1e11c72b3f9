"""The LLM suites (Megatron-Bridge, torchtitan): catalog fields, digest pins, launch commands
against the pinned entry points' flags, the interconnect probe's verdict."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from dlperf_tasks.catalog.loader import BUILTIN_DIR, load_suite
from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import CatalogError, RemoteError
from dlperf_tasks.core.model import TrialStatus
from dlperf_tasks.frameworks import get, preflight
from dlperf_tasks.frameworks.argcheck import ENTRY_POINTS
from dlperf_tasks.frameworks.launchspec import NodeSpec
from dlperf_tasks.frameworks._nccl_tests_log import parse_text
from dlperf_tasks.frameworks.megatron_bridge import SCRIPT as SCRIPT_MB
from dlperf_tasks.measure.interconnect import bus_bandwidth, judge
from dlperf_tasks.measure.stats import aggregate
from dlperf_tasks.measure.validity import gate
from dlperf_tasks.history.export_formats import cell_figures
from dlperf_tasks.history.rows import show_rows
from dlperf_tasks.report.flags import cell_flags
from dlperf_tasks.report.markdown import render_markdown
from dlperf_tasks.report.result_json import build_result, dumps
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
    # the plan hands the runtime the (mirrored) image: still pulled by the pinned digest
    mirrored = DockerRuntime(spec, image="127.0.0.1:5000/nvidia/nemo:26.04")
    assert mirrored.image == f"127.0.0.1:5000/nvidia/nemo:26.04@{DIGEST}" and mirrored.pinned_digest == DIGEST
    other_tag = DockerRuntime(spec, image="nvcr.io/nvidia/nemo:26.06")  # conf image_tag: the pin is the catalog tag's
    assert other_tag.image == "nvcr.io/nvidia/nemo:26.06" and other_tag.pinned_digest is None


def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n():
    assert bus_bandwidth(100.0, 16) == pytest.approx(187.5)
    assert bus_bandwidth(50.0, 2) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        bus_bandwidth(1.0, 0)


def _table(algbw_big: float, via: str) -> str:
    """An all_reduce_perf text table in nccl-tests' layout with one NCCL INFO transport line."""
    return (f"node1:123:456 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via {via}/0\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
            "     8388608       2097152     float     sum      -1   419.43   20.00   37.50      0   419.43   20.00   37.50      0\n"
            f"  1073741824     268435456     float     sum      -1  5368.71  {algbw_big:6.2f}  {algbw_big * 1.875:6.2f}      0"
            f"  5368.71  {algbw_big:6.2f}  {algbw_big * 1.875:6.2f}      0\n"
            "# Avg bus bandwidth    : 206.25\n")


def test_probe_flags_socket_fallback_and_low_bus_bandwidth():
    ib = parse_text(_table(200.0, "NET/IB"))
    good = judge(ib, 16, expected_busbw_gbs=400.0, min_fraction=0.8)  # 200 GB/s algbw over 16 ranks: 375 busbw
    assert good.flags == [] and good.busbw_gbs == pytest.approx(375.0)
    slow = judge(ib, 16, expected_busbw_gbs=500.0, min_fraction=0.8)
    assert len(slow.flags) == 1 and "375.0 GB/s is below 80% of the expected 500.0" in slow.flags[0]
    sock = judge(parse_text(_table(200.0, "NET/Socket")), 16, expected_busbw_gbs=None)
    assert len(sock.flags) == 1 and "sockets" in sock.flags[0]
    assert judge(parse_text("# nothing ran\n"), 16, expected_busbw_gbs=400.0).flags
    assert sock.to_dict()["sizes"][1]["busbw_gbs"] == pytest.approx(375.0)
    with pytest.raises(ValueError):
        judge(ib, 16, expected_busbw_gbs=1.0, min_fraction=0)

STANDIN_DIST = BUILTIN_DIR.parents[2] / "docker/standin/rootfs/usr/lib/python3/dist-packages"
STANDIN_ROOT = STANDIN_DIST.parents[3]


def _standin(script: str, args: list[str], rank: int, world: int, **env) -> subprocess.CompletedProcess:
    e = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(STANDIN_DIST), "DLPERF_STANDIN_TIME_SCALE": "0",
         "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": "8", **env}
    return subprocess.run([sys.executable, str(STANDIN_ROOT / script), *args], capture_output=True, text=True,
                          timeout=60, env=e)


@pytest.mark.parametrize("suite_id,script,rank", [
    ("llama31-8b-torchtitan", "workspace/torchtitan/torchtitan/train.py", 0),
    ("llama31-8b-megatron-bridge", "opt/Megatron-Bridge/scripts/performance/run_script.py", 7)])
def test_the_standin_runs_the_built_command_and_its_log_gives_the_llm_figures(suite_id, script, rank):
    """The command launch() builds runs on the stand-in unchanged; what it prints parses with the
    upstream format's parser and the gate puts tokens/s/GPU, TFLOP/s and the run checks in the metric."""
    suite = load_suite(suite_id)
    t = next(t.trial for t in plan(suite, {"trials": 1, "warmup_iters": 3, "measure_iters": 6}).trials
             if t.trial.cell.topology.name == "1n8g" and t.trial.cell.precision == "bf16")
    fw = get(suite.framework)
    argv = fw.launch(t, 0, _nodes(1), suite.launcher).argv
    args = argv[argv.index("torchtitan.train") + 1:] if "torchtitan.train" in argv else argv[argv.index(SCRIPT_MB) + 1:]
    res = _standin(script, args, rank, 8, DLPERF_STANDIN_TPS_PER_GPU="7000", DLPERF_STANDIN_TFLOPS="380")
    assert res.returncode == 0, res.stderr[-500:]
    result = gate(fw, t, fw.parse(res.stdout.splitlines(keepends=True)))
    assert result.status is TrialStatus.OK, result.reason
    assert result.metric.value == pytest.approx(7000 * 8, rel=1e-3)  # the job's tokens/s, both formats
    assert result.metric.details["tokens_per_sec_per_gpu"] == pytest.approx(7000, rel=1e-3)
    llm = result.metric.details["llm"]
    assert llm["figures"]["tokens_per_sec_per_gpu"]["value"] == pytest.approx(7000, rel=1e-3)
    assert llm["figures"]["tflops_per_gpu"]["value"] > 0 and all(c["ok"] for c in llm["checks"])
    assert llm["figures"]["mfu_pct"]["value"] is None and llm["figures"]["mfu_pct"]["reason"]  # no GPU model stated
    assert llm["reference"]["reference"] is None and "none borrowed" in llm["reference"]["reason"]

    # the same trial through the result document, report.md, the results page rows and the exports
    doc = json.loads(dumps(build_result(aggregate([result]), {"run_id": "r1", "suite": suite_id})))
    cell = doc["cells"][0]
    assert cell["llm"]["figures"]["tokens_per_sec_per_gpu"]["median"] == pytest.approx(7000, rel=1e-3)
    assert set(cell["llm"]["figures"]["tflops_per_gpu"]["conventions"]) == {"full", "megatron_bridge"}
    report = render_markdown(doc)
    assert "## LLM figures" in report and "refused:" in report and cell["cell_id"] in report
    row = show_rows(doc)[0]["llm"]
    assert row[0] == f"{cell['llm']['figures']['tokens_per_sec_per_gpu']['median']:,.1f}"
    figs = cell_figures(cell)
    assert figs["tokens_per_sec_per_gpu"] == pytest.approx(7000, rel=1e-3) and "mfu_pct" not in figs


def test_the_bridge_standin_prints_the_allocator_report_the_parser_reads():
    """Rank 0 prints Megatron-Bridge's memory report after the first two logged iterations (the peak
    reserved memory is DLPERF_STANDIN_MEMORY_MB); the parser takes the allocator's peak from it."""
    suite = load_suite("llama31-8b-megatron-bridge")
    t = next(t.trial for t in plan(suite, {"trials": 1, "warmup_iters": 3, "measure_iters": 6}).trials
             if t.trial.cell.topology.name == "1n8g")
    fw = get(suite.framework)
    argv = fw.launch(t, 0, _nodes(1), suite.launcher).argv
    res = _standin("opt/Megatron-Bridge/scripts/performance/run_script.py", argv[argv.index(SCRIPT_MB) + 1:], 0, 8,
                   DLPERF_STANDIN_MEMORY_MB="61234")
    assert res.returncode == 0, res.stderr[-500:]
    reports = [line for line in res.stdout.splitlines() if "memory (GB)" in line]
    assert [r.split(")")[0] for r in reports] == ["[Rank 0] (after 1 iterations", "[Rank 0] (after 2 iterations"]
    parsed = fw.parse(res.stdout.splitlines(keepends=True))
    assert parsed.facts.errors == []
    assert parsed.extra["memory_mib"] == pytest.approx(61234, rel=1e-4)


def test_llm_flags_name_failed_checks_a_reference_outside_its_band_and_the_interconnect():
    cell = {"llm": {"failed_checks": ["drift: 9% inside the window"], "figures": {"tflops_per_gpu": {
                "upstream": {"mismatch": True, "diff_pct": 4.2, "convention": "megatron_bridge"}}},
            "reference": {"reference": "ref-x", "tolerance_pct": 2.5, "figures": {
                "tokens_per_sec_per_gpu": {"ratio": 0.9, "published": 14451, "inside": False}}}},
            "interconnect": {"flags": ["interconnect probe: NCCL fell back to sockets between nodes"]}}
    text = "; ".join(cell_flags(cell))
    assert "run check drift: 9%" in text and "0.9 x the published 14451 (ref-x, band +-2.5%)" in text
    assert "differs by 4.2%" in text and "fell back to sockets" in text
    assert cell_flags({"llm": {"failed_checks": [], "figures": {}, "reference": {"reference": None}}}) == []


def test_the_standin_is_as_strict_as_the_entry_points():
    bad_tt = _standin("workspace/torchtitan/torchtitan/train.py", ["--module", "llama3", "--config", "llama3_8b",
                                                                    "--training.stepz", "3"], 0, 8)
    assert bad_tt.returncode == 2 and "unrecognized arguments: --training.stepz" in bad_tt.stderr
    base = ["-m", "llama", "-mr", "llama3_8b", "-g", "h100", "-ng", "8", "-ms", "2"]
    bad_dtype = _standin(f"opt/Megatron-Bridge/{SCRIPT_MB}", [*base, "-c", "fp16"], 7, 8)
    assert bad_dtype.returncode == 2 and "invalid choice: 'fp16'" in bad_dtype.stderr
    bad_override = _standin(f"opt/Megatron-Bridge/{SCRIPT_MB}", [*base, "--tensor-parallel", "2"], 7, 8)
    assert bad_override.returncode == 1 and "'--tensor-parallel'" in bad_override.stderr
    bad_tp = _standin(f"opt/Megatron-Bridge/{SCRIPT_MB}", [*base, "-tp", "3"], 7, 8)
    assert bad_tp.returncode == 1 and "not divisible by TP*PP*CP = 3" in bad_tp.stderr


def test_standin_all_reduce_perf_prints_the_nccl_tests_table_the_probe_reads():
    for net, flagged in (("IB", False), ("Socket", True)):
        res = _standin("usr/local/bin/all_reduce_perf", ["-b", "1M", "-e", "64M", "-f", "2", "-g", "8"], 0, 2,
                       DLPERF_STANDIN_ALGBW="150", DLPERF_STANDIN_NCCL_NET=net, NCCL_DEBUG="INFO")
        assert res.returncode == 0, res.stderr
        nccl = parse_text(res.stdout)
        assert not nccl.errors and len(nccl.rows) == 7
        probe = judge(nccl, 16, expected_busbw_gbs=300.0, min_fraction=0.8)
        assert probe.busbw_gbs == pytest.approx(bus_bandwidth(nccl.rows[-1].algbw_gbs, 16), rel=1e-3)
        assert any("sockets" in f for f in probe.flags) is flagged


def test_catalog_lists_image_tag_digest_and_minimum_driver(capsys):
    assert main(["catalog", "--format", "json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    tt = rows["llama31-8b-torchtitan"]
    assert tt["image"] == "nvcr.io/nvidia/pytorch:25.10-py3" and tt["digest"] is None
    assert tt["min_driver"] == "580.65" and set(tt["versions"]) == {"cuda", "nccl", "pytorch"}
    assert main(["catalog"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("llama31-8b-megatron-bridge "))
    assert "nvcr.io/nvidia/nemo:26.04" in line and "(unset)" in line and "580.65" in line
