"""Interrupting ``dlperf sweep`` on the simulated cluster (docs/testcluster.md) stops everything it
started: Ctrl-C or SIGTERM while a trial runs (the stand-in hangs after a few iterations, so the
trial would run until its limit) ends the sweep, and afterwards no container labelled with the
run, no process carrying the trial's ``DLPERF_TRIAL`` and no lease of the run is left on any node.
(A task killed by Airflow: tests/integration/test_dag_cluster_cancel.py; the local runtime:
tests/integration/test_sweep_interrupt.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import trial_process_check_command
from dlperf_tasks.remote.ssh import SSHPool
from tests.integration.test_remote_cluster import WAIT, sim_suite

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
NODE = "node3"


def _trial_pids(pool, key: str) -> list[str]:
    return pool.run(NODE, trial_process_check_command(key), timeout=60).stdout.split()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_remote_trial_and_frees_the_node(sim_cluster_env, tmp_path, sig):
    sim = sim_cluster_env
    tag = f"int{int(sig)}"
    suite = sim_suite(tmp_path, "pytorch-bert", tag, {"1n1g": 100.0}, timeout_s=300, hang_timeout_s=240,
                      env={"DLPERF_STANDIN_HANG_AFTER": "3"})
    (pt,) = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1}).trials
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf_tasks", "sweep", "--suite", str(tmp_path / f"{suite.id}.yaml"), "--cluster",
         str(sim.yaml_path), "--precisions", "fp32", "--batch-sizes", "32", "--trials", "1", "--nodes", NODE,
         "--wait-for-nodes", str(WAIT), "--retries", "0", "--no-env-capture", "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,  # SIGINT ignored, as a script's `dlperf sweep &` starts
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    c = Cluster.from_yaml(sim.yaml_path)
    with SSHPool(c) as pool:
        try:
            deadline = time.monotonic() + WAIT + 120
            run_id = None
            while time.monotonic() < deadline and proc.poll() is None:  # the trial's processes run
                run_id = run_id or (json.loads((out / "plan.json").read_text())["run_id"]
                                    if (out / "plan.json").is_file() else None)
                if run_id and sim.containers(f"dlperf.run={run_id}") and _trial_pids(pool, pt.trial.key):
                    break
                time.sleep(0.5)
            assert proc.poll() is None and run_id, f"the trial never ran: {proc.communicate()[0] if proc.poll() is not None else ''}"
            proc.send_signal(sig)
            text, _ = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130 and "interrupted" in text, text
        assert sim.containers(f"dlperf.run={run_id}") == [], text
        assert _trial_pids(pool, pt.trial.key) == [], text
        lease = pool.run(NODE, f"cat {c.node(NODE).workdir}/.lease/run_id 2>/dev/null || true").stdout.strip()
        assert lease != run_id, text
    subprocess.run(["rm", "-rf", str(Path(c.node(NODE).workdir) / f"rec-{tag}")], check=False)
