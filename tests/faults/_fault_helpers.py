"""Helpers shared by the fault-matrix and security tests (tests/faults/test_fault_*.py,
tests/faults/test_security_*.py).

Everything runs for real on a PRIVATE simulated cluster (``fault_sim``: 3 sshd nodes, own
registry on 127.0.0.1:5077, addresses 127.0.77.*; under pytest-xdist worker gwN has its own
``fault-matrix-wN``, see tests/fixtures/cluster.py), so the tests may kill nodes, stop the
registry or fill disks without disturbing the shared ``sim_cluster``. GPUs are simulated:
the stand-in trainer replays the frameworks' log formats (docker/standin/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import trial_process_check_command
from dlperf_tasks.remote.ssh import SSHPool

ROOT = Path(__file__).resolve().parents[2]
FAULT_CLUSTER = "fault-matrix"
FAULT_NET = "127.0.77"
FAULT_REGISTRY_PORT = 5077


@pytest.fixture
def fault_sim(sim_cluster_factory, monkeypatch):
    """The private 3-node cluster with its registry credentials in os.environ. Every node is
    revived (and the registry restarted) after the test, whatever the test broke."""
    sim = sim_cluster_factory(FAULT_CLUSTER, nodes=3, net=FAULT_NET, registry_port=FAULT_REGISTRY_PORT)
    for k, v in sim.env.items():
        monkeypatch.setenv(k, v)
    yield sim
    for n in sim.nodes:
        if not sim.node_is_up(n.name):
            sim.revive_node(n.name)
    if sim.health():  # e.g. the registry was stopped: `up` restarts what is down (warm, ~2 s)
        sim_cluster_factory(FAULT_CLUSTER, nodes=3, net=FAULT_NET, registry_port=FAULT_REGISTRY_PORT)


def sim_suite(tmp_path: Path, base: str, tag: str, speeds: dict, *, env: dict | None = None,
              mounts: list[str] | None = None, launcher: dict | None = None, **over):
    """A copy of catalog suite ``base`` running the stand-in fast at the given global speeds.
    Writes ``<tmp_path>/<id>.yaml`` and loads it like any suite file."""
    data = yaml.safe_load((ROOT / f"dlperf_tasks/catalog/suites/{base}.yaml").read_text())
    data["id"] = f"{base}-{tag}"
    data["env"] = {"DLPERF_STANDIN_TIME_SCALE": "0.02",
                   **{f"DLPERF_STANDIN_SPEED_{t.upper()}": str(v) for t, v in speeds.items()}, **(env or {})}
    if data.get("container"):
        data["container"]["mounts"] = list(data["container"].get("mounts") or []) + list(mounts or [])
    if base == "pytorch-bert":  # where the stand-in image keeps DeepLearningExamples' BERT
        data.setdefault("launcher", {})["workdir"] = "/workspace/examples/bert"
        data["gradient_accumulation_steps"] = [1]  # one cell per topology (accumulation: test_standin_strict_cluster)
        data.pop("exclude", None)
    data["launcher"] = {**(data.get("launcher") or {}), **(launcher or {})}
    data["window"] = {"warmup": 5, "measure": 20}
    data["topologies"] = list(speeds)
    data["timeout_s"], data["hang_timeout_s"] = 120, 60
    data.update(over)
    p = tmp_path / f"{data['id']}.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_suite(str(p))


def leftovers(sim, run_id: str, trial_keys=()) -> list[str]:
    """What a run left on the cluster (empty = clean): containers labelled with the run, processes
    carrying ``DLPERF_TRIAL=<key>`` for the given trial keys, the run's lease or scratch directory
    on any node that is up.

    Processes are matched by trial key because all simulated nodes share this machine's /proc,
    so other sessions' trials are visible too."""
    from dlperf_tasks.remote.runtime import safe_name

    found = [f"container {c['Names']} ({c['Labels'].get('dlperf.node')})" for c in sim.containers(f"dlperf.run={run_id}")]
    c = Cluster.from_yaml(sim.yaml_path)
    with SSHPool(c) as pool:
        up = [n for n in c.names if sim.node_is_up(n)]
        for key in trial_keys:  # one /proc for every node: ask one of them
            pids = pool.run(up[0], trial_process_check_command(key), timeout=60).stdout.split()
            found += [f"process {p} of trial {key}" for p in pids]
        for n in up:
            wd = c.node(n).workdir.rstrip("/")
            if pool.run(n, f"test -e {wd}/.lease && cat {wd}/.lease/run_id").stdout.strip() == run_id:
                found.append(f"lease of {run_id} on {n}")
            if Path(f"{wd}/runs/{safe_name(run_id)}").exists():
                found.append(f"scratch directory of {run_id} on {n}")
    return found


def run_leftovers(sim, res) -> list[str]:
    """:func:`leftovers` of a finished :class:`dlperf_tasks.engine.sweep.SweepResult`."""
    return leftovers(sim, res.result["run"]["run_id"], sorted({r.trial.key for r in res.all}))


def read_trials(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "trials").glob("*.json"))]


def registry_pid(sim) -> int | None:
    """PID of the private cluster's registry process (state.json's ``registry_pid``), if it runs."""
    sim.reload()
    pid = sim.state.get("registry_pid")
    if not pid:
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return None
    return int(pid)


# ---- the dlperf_pytorch DAG in a child process (= an Airflow worker that can be killed) ----------------
CHILD = r"""
import datetime as dt, json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, state, task_states
cfg = cluster_settings(Path({yaml!r}), {store!r}, Path({work!r}), lease_wait_s=240, trial_retries=0)
dag = build_pytorch_dag(cfg)
when = dt.datetime.fromisoformat(sys.argv[1])  # same logical date + run_after = the same DAG run (cleared, re-run)
dr = dag.test(logical_date=when, run_after=when, run_conf=json.loads(sys.argv[2]))
print("DAGRUN " + json.dumps({{"state": state(dr), "run_id": dr.run_id,
                             "tasks": {{f"{{t}}:{{i}}": s for (t, i), s in task_states(dr).items()}}}}), flush=True)
"""


def dag_child(tmp_path: Path, sim, work: Path, name: str, store_url: str) -> Path:
    """A script that runs the dlperf_pytorch DAG with ``dag.test()`` on ``sim`` (argv: logical date, conf JSON);
    run it with :func:`start_dag_run`: the child process is the Airflow worker."""
    script = tmp_path / f"dag_child_{name}.py"  # never a stdlib module name: the script dir is on sys.path
    script.write_text(CHILD.format(root=str(ROOT), yaml=str(sim.yaml_path), store=store_url,
                                   work=str(work)))
    return script


def start_dag_run(script: Path, logical_date: str, conf: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), logical_date, json.dumps(conf)], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT))


def dag_run_outcome(log: Path) -> dict:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("DAGRUN ")]
    assert lines, f"the DAG run did not finish; log tail:\n{log.read_text(errors='replace')[-3000:]}"
    return json.loads(lines[-1][len("DAGRUN "):])


def run_dirs(work: Path) -> list[Path]:
    return sorted(p.parent for p in work.glob("*/plan.json"))
