"""The commands of one trial attempt, built once: what a real trial starts on each node and what
``dlperf sweep --dry-run --cluster`` prints.

Every command goes through the framework's ``checked_launch`` (the pre-launch guard) and, when the
suite applies source patches, starts through the applier (catalog/patches.py); the MPI sshd helper
containers start through the same applier (:func:`helper_prelude`).
"""

from __future__ import annotations

from typing import Mapping

from dlperf_tasks import frameworks
from dlperf_tasks.catalog import patches
from dlperf_tasks.catalog.nodefiles import node_files_dir
from dlperf_tasks.frameworks.base import LaunchSpec
from dlperf_tasks.core.model import Trial
from dlperf_tasks.remote.runtime import DockerRuntime, HostRuntime, NodeFacts, safe_name


def _env_for(suite, trial: Trial) -> dict[str, str]:
    fn = getattr(suite, "env_for", None)
    return dict(fn(trial.cell.topology)) if fn else dict(suite.env or {})


def node_run_dir(node, run_id: str) -> str:
    """A run's directory on a node: ``<workdir>/runs/<run id>``."""
    return f"{node.workdir.rstrip('/')}/runs/{safe_name(run_id)}"


def trial_commands(nodes: list, trial: Trial, suite, run_id: str, runtime: HostRuntime,
                   facts: Mapping[str, NodeFacts], attempt: int = 1) -> dict[int, object]:
    """Every node's job command of one trial attempt (rank -> ``JobCommand``): the one builder of a real
    trial and of ``dlperf sweep --dry-run --cluster``. MPI frameworks start from rank 0 only."""
    fw = frameworks.get(trial.cell.framework)
    mpi = fw.launch_mode == "mpi"
    multi_mpi = mpi and isinstance(runtime, DockerRuntime) and len(nodes) > 1
    settings = dict(suite.launcher or {})
    env = _env_for(suite, trial)
    if env:
        settings["env"] = {**env, **(settings.get("env") or {})}
    if mpi and isinstance(runtime, DockerRuntime):
        settings["ssh_port"] = runtime.ssh_port
    specs = [n.node_spec() for n in nodes]
    tag = safe_name(f"{run_id}_{trial.key}_a{attempt}", 100)
    out: dict[int, object] = {}
    for r in ([0] if mpi else range(len(nodes))):
        run_dir = node_run_dir(nodes[r], run_id)
        # no container: the catalog files are where prepare put them on the host (unless the launcher says)
        node_settings = settings if isinstance(runtime, DockerRuntime) or settings.get("node_files_dir") else \
            {**settings, "node_files_dir": node_files_dir(nodes[r].workdir)}
        spec = fw.checked_launch(trial, r, specs, node_settings)
        # the suite's source patches are applied in front of the command (catalog/patches.py)
        spec = LaunchSpec(argv=patches.wrap(suite, spec.argv, spec.workdir, node_settings), env=spec.env,
                          workdir=spec.workdir)
        kw = {"mpi_key_dir": f"{run_dir}/mpi_ssh"} if multi_mpi else {}
        out[r] = runtime.node_command(spec, trial=trial, run_id=run_id, node=nodes[r], node_rank=r,
                                      facts=facts[nodes[r].name], log_dir=f"{run_dir}/{tag}", attempt=attempt, **kw)
    return out


def helper_prelude(trial: Trial, suite, specs) -> list[str]:
    """The applier's words in front of the MPI sshd containers (``[... "--"]``): mpirun starts the other
    nodes' ranks in them, so they must run the patched scripts too. Empty without applied patches."""
    if not patches.patch_files(suite):
        return []
    settings = dict(suite.launcher or {})
    spec = frameworks.get(trial.cell.framework).launch(trial, 0, specs, settings)
    return patches.wrap(suite, [], spec.workdir, settings)
