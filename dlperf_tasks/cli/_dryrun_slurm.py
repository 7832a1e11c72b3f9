"""``dlperf sweep --dry-run --cluster slurm.yaml``: the batch script and every ``srun`` line of each trial
as they would be submitted (one builder with a real submission: :func:`dlperf_tasks.remote.slurm_trial.build_job`).

Nothing connects to the login node; the node addresses are the ones Slurm hands out at run time, so the
commands show them as ``"${DLPERF_HOST_<k>}"``. Telemetry samplers appear as the overlapping steps a real
trial starts. Secret-looking environment values are masked as in the Docker dry run."""

from __future__ import annotations

import shlex
from typing import Iterator

from dlperf_tasks.cli._dryrun import DRY_RUN_ID, _SECRET


def _masked_script(script: str) -> str:
    out = []
    for word in script.split(" "):
        key, eq, _ = word.partition("=")
        out.append(f"{key}=***" if eq and _SECRET.search(key) and key.isidentifier() else word)
    return " ".join(out)


def slurm_commands(suite, plan, settings, image: str | None = None) -> Iterator[str]:
    from dlperf_tasks.frameworks.preflight import LaunchGuardError
    from dlperf_tasks.remote.slurm_inventory import SlurmCluster
    from dlperf_tasks.remote.slurm_script import options_of
    from dlperf_tasks.remote.slurm_trial import build_job
    from dlperf_tasks.telemetry.commands import gpu_loop_command

    cluster = SlurmCluster.from_yaml(settings.cluster)  # a broken file: one clear error, as a sweep
    s = cluster.slurm
    for cell in plan.cells:  # refuse before printing, as the Docker dry run does
        if cell.topology.gpus_per_node > s.gpus_per_node:
            from dlperf_tasks.core.errors import PlanError
            raise PlanError(f"topology {cell.topology.name} needs {cell.topology.gpus_per_node} GPUs per node; "
                            f"{settings.cluster}: slurm.gpus_per_node is {s.gpus_per_node}")
    image = image or cluster.resolve_image(plan.image)
    opts = options_of(s)
    yield (f"cluster {cluster.name} (Slurm, partition {s.partition}, container {s.container}); "
           f"image {image}; at most {s.max_in_flight} job(s) in flight; nothing is submitted")
    for pt in plan.trials:
        try:
            job = build_job(pt.trial, suite, DRY_RUN_ID, opts, image=image if suite.container else None,
                            gpus_per_node=pt.trial.cell.topology.gpus_per_node, telemetry=[gpu_loop_command()])
        except LaunchGuardError as exc:
            yield f"{pt.id} REFUSED: {exc}"
            continue
        yield f"{pt.id} submit: {shlex.join(job.sbatch_argv)} <<'DLPERF_BATCH'"
        yield _masked_script(job.script).rstrip("\n")
        yield "DLPERF_BATCH"
        for line in job.srun_lines:
            yield f"{pt.id} srun: {_masked_script(line)}"
