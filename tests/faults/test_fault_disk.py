"""Out of disk on a node's log directory, injected for real: a 64 KiB tmpfs, filled up, is
mounted over the node's job/log directory (``<workdir>/jobs``, where each trial's output is
written before it is copied back). The trial on that node must fail with a clear reason naming
the node and the full path; the sweep itself must not crash and the other node's trials run.
(Private simulated cluster; GPUs simulated by the stand-in trainer.)"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest

from dlperf_tasks.core.model import TrialStatus
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, read_trials, run_leftovers, sim_suite  # noqa: F401 (fixture)

pytestmark = pytest.mark.cluster


@contextlib.contextmanager
def full_tmpfs(path: Path, size: str = "64k"):
    """Mount a tiny tmpfs at ``path`` and fill it to the last byte; unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "dlperf-fault-tmpfs", str(path)], check=True)
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={path}/fill", "bs=4k"], capture_output=True)
        assert subprocess.run(["sh", "-c", f"echo x > {path}/probe"], capture_output=True).returncode != 0
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_full_log_directory_names_node_and_path(fault_sim, tmp_path):
    sim = fault_sim
    suite = sim_suite(tmp_path, "pytorch-bert", "disk", {"1n1g": 100.0})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 2})
    out = tmp_path / "out"
    jobs_dir = Path(sim.node("node2").workdir) / "jobs"
    with full_tmpfs(jobs_dir):
        res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), out,
                        SweepOptions(progress=None, nodes=["node2", "node3"], capture_env=False, retries=0,
                                     policy="packed"))
    on2 = [r for r in res.all if r.nodes == ["node2"]]
    on3 = [r for r in res.all if r.nodes == ["node3"]]
    assert on2, [(r.nodes, r.status, r.reason) for r in res.all]
    for r in on2:
        assert r.status != TrialStatus.OK
        assert "node2" in r.reason, r.reason
        assert str(jobs_dir) in r.reason and "No space left on device" in r.reason, r.reason
    assert all(r.status == TrialStatus.OK for r in on3), [r.reason for r in on3]
    assert all(r.log_paths and all((out / lp).is_file() for lp in r.log_paths) for r in on3)  # logs kept
    assert len(read_trials(out)) == 2 and (out / "result.json").is_file()
    assert run_leftovers(sim, res) == []
