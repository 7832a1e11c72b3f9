"""Node hygiene for a run: reachability probes, scratch cleanup, the leftover scan.

* :func:`unreachable` / :func:`down`: which nodes cannot be reached over SSH right now;
* :func:`clean_scratch`: remove the run's scratch directory on a node (container log mounts,
  the per-run MPI key pair), any registry config an older build left in the node's temp
  directory (``dlperf-docker-config.*``, which held the registry password) and a lease the run
  still holds there;
* :func:`leftovers`: what the run left on a node (labelled containers; on the host runtime,
  processes whose environment carries one of the run's trial keys);
* :func:`clean_run`: all of that on every node, in parallel.
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.allocation import release_run
from dlperf_tasks.remote.runtime import (LEFTOVER_REGISTRY_CONFIG_CLEANUP, TRIAL_ENV, list_containers_command,
                                         safe_name)
from dlperf_tasks.remote.ssh import SSHPool


def unreachable(pool: SSHPool, nodes: list[str]) -> dict[str, str]:
    """Node -> why, for the nodes that cannot be reached over SSH (checked in parallel)."""
    def probe(n: str) -> str | None:
        try:
            pool.client(n)
            return None
        except RemoteError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes)))) as ex:
        return {n: why for n, why in zip(nodes, ex.map(probe, nodes)) if why}


def down(pool: SSHPool, nodes: list[str]) -> list[str]:
    """The nodes of ``nodes`` that do not answer a trivial command now."""
    found = []
    for n in nodes:
        try:
            pool.run(n, "true", timeout=5, retries=1)
        except RemoteError:
            found.append(n)
    return found


def clean_scratch(pool: SSHPool, node: str, run_id: str, release_lease: bool = True) -> None:
    wd = pool.cluster.node(node).workdir.rstrip("/")
    pool.run(node, f"rm -rf {shlex.quote(f'{wd}/runs/{safe_name(run_id)}')}; {LEFTOVER_REGISTRY_CONFIG_CLEANUP}",
             timeout=60)
    if release_lease:
        release_run(pool, node, run_id)


def leftovers(pool: SSHPool, runtime, node: str, run_id: str, trial_keys: list[str]) -> list[str]:
    left = []
    if runtime.kind == "docker":
        ids = pool.run(node, list_containers_command(run_id, None, node), timeout=60).stdout.split()
        left += [f"container {i}" for i in ids]
    keys = sorted({k for k in trial_keys if k.isalnum()})
    if keys and runtime.kind != "docker":
        pattern = f"^{TRIAL_ENV}=({'|'.join(keys)})$"
        cmd = (f"for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\" 2>/dev/null | grep -Eq -- "
               f"{shlex.quote(pattern)} && p=${{f#/proc/}} && echo ${{p%/environ}}; done; true")
        left += [f"process {p}" for p in pool.run(node, cmd, timeout=60).stdout.split()]
    return left


def clean_run(pool: SSHPool, runtime, nodes: list[str], run_id: str, trial_keys: list[str] | None = None,
              release_lease: bool = True) -> tuple[list[str], list[str]]:
    """Remove the run's containers and scratch (and its leases) on every node; with
    ``trial_keys``, also scan for leftovers. Returns (cleaned nodes, problems)."""
    cleaned: list[str] = []
    problems: list[str] = []

    def one(name: str) -> None:
        try:
            runtime.cleanup(pool, name, run_id)
            clean_scratch(pool, name, run_id, release_lease)
            left = leftovers(pool, runtime, name, run_id, list(trial_keys)) if trial_keys is not None else []
            if left:
                problems.append(f"{name}: {', '.join(left)}")
            cleaned.append(name)
        except RemoteError as exc:
            problems.append(f"{name}: {exc}")

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
        list(ex.map(one, nodes))
    return sorted(cleaned), problems
