"""Node-level faults injected for real on the private simulated cluster (real sshd nodes, dockerd,
registry; GPUs simulated by the stand-in trainer):

* a node whose sshd is down BEFORE the sweep starts: the trials that need it end NODE_UNREACHABLE
  (or NOT_RUN) naming it, the others run;
* a job crashing on one rank only: NONZERO_EXIT naming the node (and its exit code), every
  container of the trial gone on every node, every node's log kept.

(sshd killed mid-trial and hangs are covered by tests/integration/test_remote_cluster.py.)
"""

from __future__ import annotations

import pytest

from dlperf_tasks.core.model import TrialStatus
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, run_leftovers, read_trials, sim_suite  # noqa: F401 (fixture)

pytestmark = pytest.mark.cluster


def test_node_unreachable_before_the_sweep(fault_sim, tmp_path):
    sim = fault_sim
    suite = sim_suite(tmp_path, "pytorch-bert", "unreach", {"1n1g": 100.0, "2n8g": 1500.0})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 2})
    out = tmp_path / "out"
    with sim.node_killed("node2"):
        res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), out,
                        SweepOptions(progress=None, nodes=["node1", "node2"], capture_env=False,
                                     unreachable_grace_s=2))
    by = {}
    for r in res.all:
        by.setdefault(r.trial.cell.topology.name, []).append(r)
    # the trials that need node2 (2 nodes out of node1, node2) cannot run and say why, naming node2
    assert len(by["2n8g"]) == 2
    for r in by["2n8g"]:
        assert r.status in (TrialStatus.NODE_UNREACHABLE, TrialStatus.NOT_RUN), (r.status, r.reason)
        assert "node2" in r.reason, r.reason
    # the others ran on the node that is up
    assert [r.status for r in by["1n1g"]] == [TrialStatus.OK, TrialStatus.OK], [r.reason for r in by["1n1g"]]
    assert all(r.nodes == ["node1"] for r in by["1n1g"])
    assert all(r.log_paths and all((out / lp).is_file() for lp in r.log_paths) for r in by["1n1g"])  # logs kept
    # every trial has its trial file (a clear status and reason), result.json/report.md written
    files = read_trials(out)
    assert len(files) == 4 and all(f["trial"]["status"] and (f["trial"]["status"] == "OK" or f["trial"]["reason"])
                                   for f in files)
    cells = {c["topology"]: c for c in res.result["cells"]}
    assert cells["1n1g"]["n_valid"] == 2 and cells["2n8g"]["n_valid"] == 0
    assert "node2" in (out / "report.md").read_text()
    assert run_leftovers(sim, res) == []


def test_crash_on_one_rank_only(fault_sim, tmp_path):
    sim = fault_sim
    # global rank 12 = node2 (ranks 8..15) crashes after iteration 8 with exit status 3
    suite = sim_suite(tmp_path, "pytorch-bert", "crash", {"2n8g": 1500.0},
                      env={"DLPERF_STANDIN_CRASH_AFTER": "8", "DLPERF_STANDIN_CRASH_RANK": "12",
                           "DLPERF_STANDIN_EXIT_CODE": "3", "DLPERF_STANDIN_TIME_SCALE": "0.1"})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    out = tmp_path / "out"
    res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), out,
                    SweepOptions(progress=None, nodes=["node1", "node2"], capture_env=False, retries=0))
    (r,) = res.ran
    assert r.status in (TrialStatus.NONZERO_EXIT, TrialStatus.INVALID_LOG), (r.status, r.reason)
    assert "node2" in r.reason and "node1 exited" not in r.reason, r.reason
    assert r.exit_codes.get("node2") not in (None, 0), r.exit_codes
    assert r.exit_codes.get("node1") in (0, None), r.exit_codes
    # logs kept: both nodes' logs, and node2's shows the crash
    assert len(r.log_paths) == 2, r.log_paths
    node2_log = next(out / lp for lp in r.log_paths if ".node1." in lp)
    assert "Traceback" in node2_log.read_text(errors="replace")
    assert run_leftovers(sim, res) == []
