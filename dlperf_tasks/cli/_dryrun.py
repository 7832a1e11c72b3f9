"""``dlperf sweep --dry-run --cluster INVENTORY``: the commands a real sweep would run on each node.

One builder serves both: :func:`dlperf_tasks.remote.trialcmd.trial_commands` (what a real trial starts),
plus the MPI sshd containers a multi-node MPI trial starts first on every node.
Nothing connects to a node: the node facts are the defaults a prepared GPU node reports (docker with the
NVIDIA runtime); a real sweep may drop flags a node's runtime refuses (noted in its env capture)."""

from __future__ import annotations

import re
import shlex
from typing import Iterator

from dlperf_tasks.core.errors import PlanError

#: environment names whose values are never printed
_SECRET = re.compile(r"PASS|SECRET|TOKEN|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
DRY_RUN_ID = "dry-run"


def _masked(items) -> list[str]:
    return [f"{k}={'***' if _SECRET.search(k) else v}" for k, v in items]


def render(cmd) -> str:
    """One shell-quoted line: ``cd DIR && env K=V ... argv``; a container's environment (the env file a real
    trial feeds ``docker run --env-file /dev/stdin``) follows as a comment. Secret-looking values are masked."""
    line = shlex.join((["env", *_masked(cmd.env.items())] if cmd.env else []) + list(cmd.argv))
    if cmd.cwd:
        line = f"cd {shlex.quote(cmd.cwd)} && {line}"
    file_env = [tuple(l.split("=", 1)) for l in (cmd.stdin or b"").decode("utf-8", "replace").splitlines() if "=" in l]
    if file_env:
        line += "  # env file: " + " ".join(shlex.quote(x) for x in _masked(file_env))
    return line


def fitting_nodes(cluster, topology) -> list:
    """The inventory's first nodes with enough GPUs for ``topology``; PlanError when too few."""
    nodes = [n for n in cluster.nodes if n.gpus >= topology.gpus_per_node][:topology.nodes]
    if len(nodes) < topology.nodes:
        have = len([n for n in cluster.nodes if n.gpus >= topology.gpus_per_node])
        raise PlanError(f"topology {topology.name} needs {topology.nodes} node(s) with {topology.gpus_per_node} "
                        f"GPUs; cluster {cluster.name} has {have} such node(s) of {len(cluster.nodes)}")
    return nodes


def cluster_commands(suite, plan, settings, image: str | None = None, ssh_port: int | None = None) -> Iterator[str]:
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.remote.runtime import NodeFacts, make_runtime
    from dlperf_tasks.frameworks.preflight import LaunchGuardError
    from dlperf_tasks.remote.trialcmd import trial_commands

    cluster = Cluster.from_yaml(settings.cluster)  # a missing or broken file: one clear error, as a sweep
    chosen = {c.topology: fitting_nodes(cluster, c.topology) for c in plan.cells}  # refuse before printing
    image = image or cluster.resolve_image(plan.image)
    runtime = make_runtime(suite.container, image=image, registry=cluster.registry, launcher=suite.launcher,
                           ssh_port=ssh_port if ssh_port is not None else cluster.mpi_ssh_port)
    kind = f"container {image}" if suite.container else "host runtime"
    yield f"cluster {cluster.name} ({len(cluster.nodes)} nodes); {kind}; nothing runs"
    for pt in plan.trials:
        nodes = chosen[pt.trial.cell.topology]
        facts = {n.name: NodeFacts(n.name, docker=True, nvidia_runtime=True) for n in nodes}
        try:
            commands = trial_commands(nodes, pt.trial, suite, DRY_RUN_ID, runtime, facts)
        except LaunchGuardError as exc:  # what the real sweep would refuse before launch
            yield f"{pt.id} REFUSED: {exc}"
            continue
        yield from _mpi_helpers(pt, nodes, suite, runtime, facts, commands)
        for rank, cmd in commands.items():
            yield f"{pt.id} {nodes[rank].name} (node rank {rank}): {render(cmd)}"


def _mpi_helpers(pt, nodes, suite, runtime, facts, commands) -> Iterator[str]:
    """A multi-node MPI trial in containers first starts an sshd container on every node (mpirun reaches
    the other nodes' ranks through them): the real trial's own command (remote.runtime)."""
    from dlperf_tasks.frameworks import get
    from dlperf_tasks.remote.runtime import DockerRuntime
    from dlperf_tasks.remote.trialcmd import helper_prelude, node_run_dir

    if not (isinstance(runtime, DockerRuntime) and get(pt.trial.cell.framework).launch_mode == "mpi"
            and len(nodes) > 1):
        return
    prelude = helper_prelude(pt.trial, suite, [n.node_spec() for n in nodes])
    for i, node in enumerate(nodes):
        run_dir = node_run_dir(node, DRY_RUN_ID)
        line = runtime.mpi_helper_command(trial=pt.trial, run_id=DRY_RUN_ID, node=node, facts=facts[node.name],
                                          log_dir=f"{run_dir}/mpi_sshd", key_dir=f"{run_dir}/mpi_ssh",
                                          prelude=prelude)
        yield f"{pt.id} {node.name} (node rank {i}, MPI sshd container): {line}"
