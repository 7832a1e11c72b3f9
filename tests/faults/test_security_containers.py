"""Containers run without --privileged (and without extra capabilities or devices) unless the
suite explicitly asks for them. Checked on the REAL containers of a running trial with
``docker inspect`` (private simulated cluster; GPUs simulated by the stand-in trainer), and on
the built ``docker run`` argv for every catalog suite."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from dlperf_tasks.catalog.loader import list_suites
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import NodeFacts, docker_run_argv
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, run_leftovers, sim_suite  # noqa: F401 (fixture)


def _inspect_while_running(run_id: str, found: list, stop: threading.Event) -> None:
    while not stop.is_set():
        ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=dlperf.run={run_id}"],
                             capture_output=True, text=True).stdout.split()
        if ids:
            out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True)
            if out.returncode == 0:
                found.extend(json.loads(out.stdout))
                return
        time.sleep(0.2)


@pytest.mark.cluster
def test_real_containers_are_not_privileged(fault_sim, tmp_path):
    sim = fault_sim
    suite = sim_suite(tmp_path, "pytorch-bert", "nopriv", {"2n8g": 1500.0},
                      env={"DLPERF_STANDIN_TIME_SCALE": "0.3"},
                      container={**_container_of("pytorch-bert"), "privileged": False, "cap_add": [], "devices": []})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    run_id = f"fault-nopriv-{int(time.time())}"
    found: list = []
    stop = threading.Event()
    th = threading.Thread(target=_inspect_while_running, args=(run_id, found, stop))
    th.start()
    try:
        res = run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), tmp_path / "out",
                        SweepOptions(progress=None, nodes=["node1", "node2"], capture_env=False, run_id=run_id,
                                     retries=0))
    finally:
        stop.set()
        th.join()
    assert res.ran[0].status.value == "OK", res.ran[0].reason
    assert found, "no running container of the trial was seen"
    for c in found:
        hc = c["HostConfig"]
        assert hc["Privileged"] is False, c["Name"]
        assert not hc.get("CapAdd"), (c["Name"], hc.get("CapAdd"))
        assert not hc.get("Devices"), (c["Name"], hc.get("Devices"))
        assert c["Config"]["Labels"]["dlperf.run"] == run_id and c["Config"]["Labels"]["dlperf.node"] in ("node1", "node2")
        env = "\n".join(c["Config"]["Env"] or [])
        assert sim.env["DLPERF_REGISTRY_PASSWORD"] not in env
    assert run_leftovers(sim, res) == []


def _container_of(suite_id: str) -> dict:
    import yaml

    from tests.faults._fault_helpers import ROOT

    return yaml.safe_load((ROOT / f"dlperf_tasks/catalog/suites/{suite_id}.yaml").read_text())["container"]


def test_privileged_only_where_the_suite_asks():
    """Every catalog suite: --privileged in the argv iff the suite says ``privileged: true``; never
    for a copy of the suite that does not (devices/caps follow the suite too)."""
    from dataclasses import replace

    from dlperf_tasks.remote.inventory import Node

    node = Node(name="n1", host="10.0.0.1", workdir="/w")
    suites = [s for s in list_suites(errors=[]) if s.container is not None]
    assert suites
    for s in suites:
        for spec in (s.container, replace(s.container, privileged=False, devices=(), cap_add=())):
            argv = docker_run_argv(spec, "img", "c", {}, node=node, facts=NodeFacts("n1", infiniband=True), env_file=None,
                                   workdir=None, command=["true"])
            assert ("--privileged" in argv) == bool(spec.privileged), (s.id, argv)
            assert any(a.startswith("--device=") for a in argv) == bool(spec.devices), (s.id, argv)


def test_no_catalog_suite_runs_privileged():
    """The seeds started containers with --privileged; the catalog asks only for what InfiniBand
    needs (the /dev/infiniband device when the node has it, and IPC_LOCK)."""
    suites = [s for s in list_suites(errors=[]) if s.container is not None]
    assert len(suites) >= 5
    for s in suites:
        assert not s.container.privileged, s.id
        assert set(s.container.cap_add) <= {"IPC_LOCK"}, s.id
        assert set(s.container.devices) <= {"/dev/infiniband"}, s.id
