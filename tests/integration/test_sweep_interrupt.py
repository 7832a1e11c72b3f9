"""Interrupting ``dlperf sweep --cluster local`` stops everything its trials started: a toy
framework whose "ranks" each start a helper in a session of their own (as torchrun starts its
ranks), so a process-group kill alone would leave the helpers running. After Ctrl-C, SIGTERM,
a stop from outside (what a killed Airflow task calls) and a node exiting non-zero, no process the
trial started is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.integration.test_toy_framework import FRAMEWORK as TOY_FRAMEWORK

ROOT = Path(__file__).resolve().parents[2]

# the toy framework of test_toy_framework.py, launching the trainer below
FRAMEWORK = TOY_FRAMEWORK.replace('"toy_fw"', '"stubborn_fw"').replace("toy_trainer.py", "stubborn_trainer.py")

# each node: a helper in its own session that ignores SIGTERM, then steps until stopped
# (or, with STUBBORN_FAIL_RANK, that node exits non-zero once its helper runs)
TRAINER = '''
import os, signal, subprocess, sys, time
rank = "0"  # one node per trial
pids = os.environ["STUBBORN_PIDS"]
ready = os.path.join(pids, rank + ".ready")
helper = subprocess.Popen([sys.executable, "-c",
                           "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                           "open(sys.argv[1], 'w').close(); time.sleep(600)", ready],
                          start_new_session=True)
while not os.path.exists(ready):  # the helper ignores SIGTERM from here on
    time.sleep(0.01)
with open(os.path.join(pids, rank + ".tmp"), "w") as fh:
    fh.write(f"{os.getpid()} {helper.pid}")
os.replace(os.path.join(pids, rank + ".tmp"), os.path.join(pids, rank))
if os.environ.get("STUBBORN_FAIL_RANK") == rank:
    sys.exit(3)
i = 0
while True:
    i += 1
    print(f"toy step={i} speed=100", flush=True)
    time.sleep(0.1)
'''

SUITE = """
id: stubborn
framework: stubborn_fw
dag: stubborn
model: toynet
description: A trainer whose helpers outlive a process-group kill.
container: null
upstream: null
launcher: {}
env: {}
window: {warmup: 2, measure: 1000000}
trials: 1
batch_sizes: [4]
precisions: [fp32]
xla: [false]
topologies: [1n1g]
timeout_s: 300
hang_timeout_s: 120
"""


@pytest.fixture
def stubborn(tmp_path):
    d = tmp_path / "catalog"
    (d / "frameworks").mkdir(parents=True)
    (d / "frameworks" / "stubborn_fw.py").write_text(textwrap.dedent(FRAMEWORK))
    (d / "stubborn_trainer.py").write_text(TRAINER)
    (d / "stubborn.yaml").write_text(SUITE)
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "DLPERF_CATALOG_PATH": str(d), "STUBBORN_PIDS": str(pids),
           "DLPERF_WORK_DIR": str(tmp_path / "work"), "PYTHONPATH": str(ROOT)}
    return env, pids, tmp_path


def started(pids: Path, proc: subprocess.Popen | None = None, n: int = 1, timeout_s: float = 60.0) -> list[int]:
    """Wait until ``n`` nodes have started their helpers; every pid they wrote."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sweep ended before its trial started: {proc.stdout.read()}")
        names = [p for p in pids.iterdir() if not p.name.endswith((".tmp", ".ready"))]
        if len(names) >= n:
            return [int(x) for p in names for x in p.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"the trial's nodes did not start within {timeout_s:.0f} s")


def running(pids: list[int]) -> list[int]:
    """The pids still running (a zombie waiting for its reaper counts as stopped)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def sweep(env, tmp_path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlperf_tasks", "sweep", "--suite", "stubborn", "--cluster",
                             "local", "--out", str(tmp_path / "out"), "--retries", "0"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_as_a_background_job)


def _as_a_background_job() -> None:
    """SIGINT ignored, as a shell without job control starts ``dlperf sweep &`` (Python keeps it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def in_process(stubborn, monkeypatch):
    """The stubborn suite's one trial, for local.run_trial in this process."""
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.frameworks import _CACHE, get

    env, pids, tmp_path = stubborn
    for k in ("DLPERF_CATALOG_PATH", "STUBBORN_PIDS"):
        monkeypatch.setenv(k, env[k])
    _CACHE.pop("stubborn_fw", None)
    suite = load_suite("stubborn")
    (pt,) = plan(suite).trials
    return suite, get(suite.framework), pt, pids, tmp_path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_every_process_of_the_trial(stubborn, sig):
    env, pids, tmp_path = stubborn
    proc = sweep(env, tmp_path)
    try:
        trial_pids = started(pids, proc)
        assert len(running(trial_pids)) == 2
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    assert running(trial_pids) == [], out


def test_a_failed_node_leaves_no_helper_behind(stubborn):
    env, pids, tmp_path = stubborn
    proc = sweep({**env, "STUBBORN_FAIL_RANK": "0"}, tmp_path)
    try:
        trial_pids = started(pids)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    assert "0/1 trials valid" in out, out
    assert running(trial_pids) == [], out


def test_a_stop_from_outside_stops_every_helper(stubborn, monkeypatch):
    """What a killed Airflow task does (engine.trials.stop_trial -> local.stop), from another thread."""
    from dlperf_tasks.remote import local

    suite, fw, pt, pids, tmp_path = in_process(stubborn, monkeypatch)
    box: dict = {}
    runner = threading.Thread(target=lambda: box.setdefault("r", local.run_trial(
        pt.trial, fw, suite.launcher, tmp_path / "run")))
    runner.start()
    trial_pids = started(pids)
    assert local.stop(pt.trial.key, grace_s=1.0) == 1
    assert running(trial_pids) == []
    runner.join(timeout=60)
    assert not runner.is_alive() and not box["r"].valid


def test_the_sweeps_own_failure_while_a_trial_runs_stops_every_helper(stubborn, monkeypatch):
    """An error in the driver while the trial runs (here: the watchdog itself fails once the
    trial's processes run) propagates after everything the trial started is stopped."""
    from dlperf_tasks.remote import local

    suite, fw, pt, pids, tmp_path = in_process(stubborn, monkeypatch)
    seen: list[int] = []

    def broken_watch(*args, **kw):
        seen.extend(started(pids))
        raise RuntimeError("the driver broke")

    monkeypatch.setattr(local, "_watch", broken_watch)
    with pytest.raises(RuntimeError, match="the driver broke"):
        local.run_trial(pt.trial, fw, suite.launcher, tmp_path / "run")
    assert len(seen) == 2 and running(seen) == []
