"""The interconnect probe: the stand-in ``all_reduce_perf`` (options and output as nccl-tests'), the
probe's launch and settings, its failure path, and what a cell's result, report and flags show
(the probe on the simulated cluster: tests/integration/test_remote_trial.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dlperf_tasks.catalog.loader import BUILTIN_DIR, load_suite
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.core.model import TrialResult, TrialStatus
from dlperf_tasks.engine.probe import probe_suite, probe_trial, run_probe
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.frameworks import get
from dlperf_tasks.frameworks._nccl_tests_log import parse_text
from dlperf_tasks.frameworks.launchspec import NodeSpec
from dlperf_tasks.measure.interconnect import attribute, judge, probe_settings
from dlperf_tasks.report.flags import row_flags
from dlperf_tasks.report.probe_summary import annotate, cell_interconnect, probe_table
from dlperf_tasks.report.result_json import trial_from_dict, trial_to_dict

DIST = BUILTIN_DIR.parents[2] / "docker/standin/rootfs/usr/lib/python3/dist-packages"
BIN = DIST.parents[3] / "usr/local/bin/all_reduce_perf"
GENUINE = BUILTIN_DIR.parents[2] / "tests/data/genuine_logs/llm/nccl_tests_mooncake_pr3484.log"


def _arp(args: list[str], world: int = 2, **env) -> subprocess.CompletedProcess:
    e = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(DIST), "OMPI_COMM_WORLD_RANK": "0",
         "OMPI_COMM_WORLD_SIZE": str(world), **env}
    return subprocess.run([sys.executable, str(BIN), *args], capture_output=True, text=True, timeout=60, env=e)


def test_standin_all_reduce_perf_prints_the_genuine_table_layout_and_the_transport_only_with_nccl_debug():
    ok = _arp(["-b", "8", "-e", "8G", "-f", "2", "-g", "1"], world=16, NCCL_DEBUG="INFO", DLPERF_STANDIN_ALGBW="40")
    assert ok.returncode == 0, ok.stderr
    nccl = parse_text(ok.stdout)
    assert not nccl.errors and len(nccl.rows) == 31 and nccl.rows[-1].size_bytes == 8 << 30
    assert nccl.transports == ["NET/IB"] and not nccl.socket_fallback
    genuine = [ln.split() for ln in GENUINE.read_text().splitlines() if ln.strip()]
    ours = [ln.split() for ln in ok.stdout.splitlines() if ln.strip() and not ln.startswith("#") and "NCCL" not in ln]
    assert {len(r) for r in ours} == {len(r) for r in genuine} == {13}  # size count type redop root | 2 x 4
    assert [r[2:5] for r in ours[:1]] == [r[2:5] for r in genuine[:1]] == [["float", "sum", "-1"]]
    assert "# Avg bus bandwidth" in ok.stdout and "# Collective test concluded: all_reduce_perf" in ok.stdout
    quiet = parse_text(_arp(["-b", "1M", "-e", "4M", "-f", "2"]).stdout)
    assert quiet.rows and quiet.transports == []  # NCCL prints its INFO lines only under NCCL_DEBUG=INFO
    sock = parse_text(_arp(["-b", "1M", "-e", "4M", "-f", "2"], NCCL_DEBUG="INFO", DLPERF_STANDIN_NCCL_NET="Socket").stdout)
    assert sock.socket_fallback


def test_standin_all_reduce_perf_is_as_strict_as_nccl_tests_getopt():
    unknown = _arp(["-b", "8", "--sizes", "8G"])  # common.cu: usage on stdout, return 0, no table
    assert unknown.returncode == 0 and "unrecognized option '--sizes'" in unknown.stderr
    assert "invalid option '?'" in unknown.stdout and "USAGE: all_reduce_perf" in unknown.stdout
    assert not parse_text(unknown.stdout).rows
    short = _arp(["-q", "1"])
    assert short.returncode == 0 and "invalid option -- 'q'" in short.stderr and not parse_text(short.stdout).rows
    missing = _arp(["-b"])
    assert "option requires an argument -- 'b'" in missing.stderr and not parse_text(missing.stdout).rows
    bad = _arp(["-b", "8X", "-e", "1G"])
    assert bad.returncode == 255 and "invalid size specified for 'minbytes'" in bad.stderr
    order = _arp(["-b", "1G", "-e", "1M"])
    assert order.returncode == 255 and "invalid sizes for 'minbytes' and 'maxbytes': 1073741824 > 1048576" in order.stderr
    long_abbrev = _arp(["--minb", "1M", "--maxbytes=2M", "-f", "2"])  # getopt_long takes unique prefixes
    assert long_abbrev.returncode == 0 and len(parse_text(long_abbrev.stdout).rows) == 2
    fail = _arp(["-b", "8", "-e", "1M", "-f", "2"], DLPERF_STANDIN_NCCL_FAIL="1")
    assert fail.returncode == 1 and "unhandled system error" in fail.stderr and not parse_text(fail.stdout).rows


def _two_node_trial():
    suite = load_suite("llama31-8b-torchtitan")
    t = next(pt.trial for pt in plan(suite, {"trials": 1}).trials if pt.trial.cell.topology.name == "2n8g")
    return suite, t


def test_probe_launch_is_nccl_tests_multi_node_mpirun_line_with_one_gpu_per_rank():
    suite, trial = _two_node_trial()
    cfg = probe_settings(suite.extra["interconnect_probe"], {"expected_busbw_gbs": 350.0, "max_bytes": "1G"})
    pt, ps = probe_trial(trial), probe_suite(suite, cfg)
    assert pt.cell.framework == "nccl_probe" and pt.key != trial.key and pt.cell.topology == trial.cell.topology
    assert ps.upstream is None and ps.timeout_s == 600 and ps.env == suite.env
    nodes = [NodeSpec("node1", "10.0.0.1", 8, "ib0"), NodeSpec("node2", "10.0.0.2", 8, "ib0")]
    spec = get("nccl_probe").checked_launch(pt, 0, nodes, {**ps.launcher, "ssh_port": 2223})
    argv = spec.argv
    assert argv[:5] == ["mpirun", "--allow-run-as-root", "-np", "16", "-H"] and argv[5] == "10.0.0.1:8,10.0.0.2:8"
    assert argv[-9:] == ["/usr/local/bin/all_reduce_perf_mpi", "-b", "8", "-e", "1G", "-f", "2", "-g", "1"]
    assert "NCCL_DEBUG" in argv and spec.env["NCCL_DEBUG"] == "INFO"
    with pytest.raises(ValueError, match=r"interconnect_probe.max_bytes = '8G; rm' is not a size"):
        get("nccl_probe").launch(pt, 0, nodes, {"max_bytes": "8G; rm"})


def test_probe_settings_defaults_opt_out_and_the_cluster_files_bound_wins():
    assert probe_settings(None, {"expected_busbw_gbs": 370}) is None  # the suite's image has no nccl-tests
    assert probe_settings({}, None)["expected_busbw_gbs"] is None and probe_settings(True, None)["min_fraction"] == 0.8
    merged = probe_settings({"expected_busbw_gbs": 100, "binary": "all_reduce_perf_mpi"}, {"expected_busbw_gbs": 370})
    assert merged["expected_busbw_gbs"] == 370 and merged["binary"] == "all_reduce_perf_mpi"
    assert probe_settings(False, {"expected_busbw_gbs": 370}) is None
    assert probe_settings({"enabled": False}, None) is None and probe_settings(None, False) is None
    with pytest.raises(ValueError, match=r"^cl\.min_fraction = 1.5 must be in \(0, 1\]$"):
        probe_settings({}, {"min_fraction": 1.5}, where="cl")
    with pytest.raises(ValueError, match=r"expected_busbw_gbs = 'fast' must be a number above 0"):
        probe_settings({"expected_busbw_gbs": "fast"}, None)


def test_a_probe_that_cannot_run_is_recorded_with_its_reason_and_never_raises(tmp_path):
    suite, trial = _two_node_trial()
    rd = RunDir.at(tmp_path / "run", "run-1", suite=suite.id)

    class NoCluster:
        name = "c"
        interconnect_probe = {"expected_busbw_gbs": 370}

        def node(self, name):
            raise OSError(f"node {name} is gone")

    res = run_probe(NoCluster(), ["node1", "node2"], trial, suite, rd, pool=None, runtime=None)
    assert res["error"].startswith("OSError: node node1 is gone") and res["expected_busbw_gbs"] == 370
    assert res["flags"] == [f"interconnect probe failed: {res['error']}"]
    assert (tmp_path / "run" / "probes").is_dir()  # recorded, and reused for the same cell and nodes
    assert run_probe(NoCluster(), ["node1", "node2"], trial, suite, rd, pool=None, runtime=None) == res
    NoCluster.interconnect_probe = {"min_fraction": 0}  # a bad setting: recorded, named
    other = run_probe(NoCluster(), ["node3", "node4"], trial, suite, rd, pool=None, runtime=None)
    assert "min_fraction = 0 must be in (0, 1]" in other["error"]
    NoCluster.interconnect_probe = False  # the opt-out
    assert run_probe(NoCluster(), ["node5", "node6"], trial, suite, rd, pool=None, runtime=None) is None
    one = next(pt.trial for pt in plan(suite, {"trials": 1}).trials if pt.trial.cell.topology.nodes == 1)
    assert run_probe(NoCluster(), ["node1"], one, suite, rd, pool=None, runtime=None) is None


def _probe(algbw: float, net: str = "IB", expected: float | None = 370.0, nodes=("node1", "node2")) -> dict:
    text = _arp(["-b", "1M", "-e", "1G", "-f", "2"], world=16, NCCL_DEBUG="INFO", DLPERF_STANDIN_ALGBW=str(algbw),
                DLPERF_STANDIN_NCCL_NET=net).stdout
    return {**judge(parse_text(text), 16, expected_busbw_gbs=expected).to_dict(), "nodes": list(nodes),
            "slow_scaling_below": 0.9}


def test_the_trial_record_carries_the_probe_and_the_cell_keeps_the_worst_one():
    _, trial = _two_node_trial()
    good, slow = _probe(200.0), _probe(100.0, nodes=("node3", "node4"))
    assert good["flags"] == [] and good["busbw_gbs"] == pytest.approx(200 * 64 / 65 * 2 * 15 / 16, rel=1e-3)  # the plateau
    assert slow["flags"] == [f"interconnect probe: bus bandwidth {slow['busbw_gbs']:.1f} GB/s is below 80% of the "
                             "expected 370.0 GB/s"]
    r = TrialResult(trial=trial, status=TrialStatus.OK, interconnect=good)
    assert trial_from_dict(trial.cell, trial_to_dict(r)).interconnect == good
    cell = cell_interconnect([r, TrialResult(trial=trial, status=TrialStatus.OK, interconnect=slow)])
    assert cell["nodes"] == ["node3", "node4"] and cell["flags"] == slow["flags"] and len(cell["probes"]) == 2
    assert cell_interconnect([TrialResult(trial=trial, status=TrialStatus.OK)]) is None


@pytest.mark.parametrize("probe,stragglers,expect", [
    (_probe(100.0), [], "the interconnect moved (bus bandwidth"),
    (_probe(200.0, net="Socket"), [], "the interconnect moved (NCCL fell back to sockets"),
    (_probe(200.0), ["node2"], "a straggler rank: node(s) node2 stepped slower"),
    (_probe(200.0), [], "the compute side moved (the probe's bus bandwidth is as expected"),
    (None, [], "the compute side or the interconnect (no probe result; no straggler rank)"),
])
def test_a_slow_cell_says_whether_the_interconnect_a_straggler_or_the_compute_side_moved(probe, stragglers, expect):
    why = attribute(probe, stragglers, 0.62, 0.9)
    assert why.startswith("slow cell (scaling efficiency 0.62 < 0.90): ") and expect in why
    assert attribute(probe, stragglers, 0.95, 0.9) is None and attribute(probe, stragglers, None, 0.9) is None


def test_result_report_and_flags_show_the_probe_and_the_attribution():
    probe = _probe(200.0, net="Socket", expected=None)
    assert probe["flags"] == ["interconnect probe: NCCL fell back to sockets between nodes (no InfiniBand/RoCE transport)"]
    doc = {"run": {"stragglers": {"trials": [{"trial_id": "c2/t1", "slow": ["node2"]}]}},
           "cells": [{"cell_id": "c2", "nodes": 2, "scaling_efficiency": 0.7, "trials": [{"index": 1}], "interconnect": probe},
                     {"cell_id": "c1", "nodes": 1, "scaling_efficiency": 0.5, "trials": [{"index": 1}]},
                     {"cell_id": "c3", "nodes": 2, "scaling_efficiency": 0.5, "trials": [{"index": 1}]}]}
    annotate(doc)
    c2, c1, c3 = doc["cells"]
    assert "slow_attribution" not in c1 and "slow_attribution" not in c3  # one node; not probed
    assert "NCCL fell back to sockets" in c2["slow_attribution"] and "node(s) node2" in c2["slow_attribution"]
    assert row_flags(c2) == [*probe["flags"], c2["slow_attribution"]]
    md = "\n".join(probe_table(doc["cells"]))
    assert f"| c2 | node1, node2 | {probe['busbw_gbs']:,.1f} | not configured | NET/Socket |" in md and "c1 |" not in md


def _slurm_job(trial, suite, **over):
    from dlperf_tasks.remote.slurm_script import SlurmOptions
    from dlperf_tasks.remote.slurm_trial import build_job

    opts = SlurmOptions(shared_dir="/shared/dlperf", container="pyxis", **over)
    return build_job(trial, suite, "run-1", opts, image="nvcr.io/nvidia/pytorch:25.10-py3", gpus_per_node=8)


def test_on_slurm_the_probe_is_a_pmix_job_step_before_training_in_the_same_image():
    suite, trial = _two_node_trial()
    job = _slurm_job(trial, suite, interconnect_probe={"expected_busbw_gbs": 370, "timeout_s": 300})
    probe_srun, train_srun = job.srun_lines[0], job.srun_lines[-1]
    assert probe_srun.startswith("srun --nodes=2 --mpi=pmix --ntasks-per-node=8 --time=5 "
                                 f"--output={job.log_dir}/probe.log --export=MASTER_ADDR,DLPERF_HOST_0,DLPERF_HOST_1 "
                                 "'--container-image=nvcr.io#nvidia/pytorch:25.10-py3' ")
    image_flags = [w for w in train_srun.split() if w.startswith("--container-image")]
    assert image_flags == [w for w in probe_srun.split() if w.startswith("--container-image")]
    script = job.script
    assert script.index(probe_srun) < script.index(train_srun) and 'echo "dlperf-probe-exit: $?"' in script
    step = script.split(f"cat > {job.log_dir}/probe.sh <<'DLPERF_STEP_END'\n", 1)[1].split("\nDLPERF_STEP_END", 1)[0]
    assert "mpirun" not in step and "NCCL_DEBUG=INFO" in step
    assert step.endswith("/usr/local/bin/all_reduce_perf_mpi -b 8 -e 8G -f 2 -g 1")
    assert '{"expected_busbw_gbs": 370, "min_fraction": 0.8, "slow_scaling_below": 0.9}' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    off = _slurm_job(trial, suite, interconnect_probe=False)  # the cluster file's opt-out
    assert "probe" not in off.script and len(off.srun_lines) == 1
    bad = _slurm_job(trial, suite, interconnect_probe={"min_fraction": 2})  # recorded, training still runs
    assert "probe.sh" not in bad.script and "min_fraction = 2 must be in (0, 1]" in bad.script
    one = next(pt.trial for pt in plan(suite, {"trials": 1}).trials if pt.trial.cell.topology.nodes == 1)
    assert "probe" not in _slurm_job(one, suite).script
