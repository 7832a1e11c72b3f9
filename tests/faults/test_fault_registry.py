"""Registry down while a sweep prepares the nodes (login + pull), injected for real: the private
cluster's registry process (Debian's docker-registry, htpasswd auth) is stopped, and the image
tag is removed from the local docker so the pull really has to ask the registry. The sweep
must fail in its prepare step, before any trial, with an error naming the registry; nothing
is left on the nodes (no container, no lease). (GPUs simulated; everything else real.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.engine.sweep import SweepOptions, run_sweep
from tests.faults._fault_helpers import fault_sim, leftovers, registry_pid, sim_suite  # noqa: F401

pytestmark = pytest.mark.cluster


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def test_registry_down_fails_prepare_naming_the_registry(fault_sim, tmp_path, docker_config):
    sim = fault_sim
    image = sim.image("pytorch:20.12-py3")  # a tag the other fault tests do not use
    subprocess.run(["docker", "rmi", image], capture_output=True)  # the pull must really ask the registry
    pid = registry_pid(sim)
    assert pid, "the private cluster's registry is not running"
    _stop(pid)
    suite = sim_suite(tmp_path, "pytorch-bert", "regdown", {"1n1g": 100.0})
    p = plan(suite, {"precisions": "fp32", "batch_sizes": "32", "trials": 1})
    out = tmp_path / "out"
    run_id = f"fault-regdown-{int(time.time())}"
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as err:
        run_sweep(suite, p, Cluster.from_yaml(sim.yaml_path), out,
                  SweepOptions(progress=None, nodes=["node3"], capture_env=False, image=image, run_id=run_id))
    msg = str(err.value)
    assert sim.registry in msg and "node3" in msg, msg  # the private cluster's own registry (127.0.0.1:<port>)
    assert "registry" in msg or "docker pull" in msg, msg
    assert time.monotonic() - t0 < 120
    assert not (out / "trials").exists(), "no trial may start when prepare failed"
    assert sim.env["DLPERF_REGISTRY_PASSWORD"] not in msg
    assert leftovers(sim, run_id) == []
