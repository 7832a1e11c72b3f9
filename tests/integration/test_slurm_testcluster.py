"""The real test Slurm (scripts/testslurm, docs/slurm.md): Debian's slurmctld + one slurmd per
simulated node + slurmdbd + MUNGE, reached through a login node over SSH. The GPUs are simulated
(gres backed by /dev/null-like devices); everything else here is the real Slurm."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.cluster, pytest.mark.slurm]


def test_login_node_schedules_gpus_and_accounts_the_job(slurm_cluster_clean):
    c = slurm_cluster_clean
    info = c.ssh("sinfo -h -o '%P %G %D %T'")
    assert info.returncode == 0, info.stderr
    assert "gpu* gpu:8 4 idle" in info.stdout.splitlines()
    step = c.ssh(f"cd {c.shared} && srun -J dlperf-fixture -p {c.partition} -A {c.account} "
                 f"--qos={c.qos} -N2 --gpus-per-node=8 --exclusive "
                 "bash -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $SLURM_JOB_ID'")
    assert step.returncode == 0, step.stderr
    lines = sorted(step.stdout.split("\n")[:2])
    assert [ln.split()[:2] for ln in lines] == [["node1", "0,1,2,3,4,5,6,7"], ["node2", "0,1,2,3,4,5,6,7"]]
    job_id = lines[0].split()[2]
    acct = c.wait_sacct(job_id)
    assert {k: acct[k] for k in ("state", "exit", "nodes", "account")} == {
        "state": "COMPLETED", "exit": "0:0", "nodes": "node[1-2]", "account": c.account}


def test_bad_partition_and_account_are_refused_at_submit(slurm_cluster_clean):
    c = slurm_cluster_clean
    part = c.ssh("sbatch --parsable -p nosuch --wrap true")
    assert part.returncode != 0 and "invalid partition specified: nosuch" in part.stderr
    acct = c.ssh(f"sbatch --parsable -p {c.partition} -A nosuch --wrap true")
    assert acct.returncode != 0 and "Invalid account" in acct.stderr
    qos = c.ssh(f"sbatch --parsable -p {c.partition} -A {c.account} --qos=nosuch --wrap true")
    assert qos.returncode != 0 and "Invalid qos" in qos.stderr
    assert c.jobs() == []


def test_busy_partition_leaves_a_job_pending_for_resources(slurm_cluster_clean):
    c = slurm_cluster_clean
    first = c.ssh(f"cd {c.shared} && sbatch --parsable -p {c.small_partition} -N1 --exclusive --wrap 'sleep 120'")
    assert first.returncode == 0, first.stderr
    c.wait_job(first.stdout.strip(), "RUNNING")
    second = c.ssh(f"cd {c.shared} && sbatch --parsable -p {c.small_partition} -N1 --exclusive --wrap true")
    assert second.returncode == 0, second.stderr
    job = c.wait_job(second.stdout.strip(), "PENDING", reason=lambda r: r in ("Resources", "Priority"))
    assert job["nodes"] == ""
    assert {j["id"] for j in c.cancel_all()} == {first.stdout.strip(), second.stdout.strip()}


def _pyxis_options() -> dict:
    data = json.loads((ROOT / "dlperf_tasks" / "remote" / "pyxis_options.json").read_text())
    return {o["name"]: o["arg"] for o in data["options"]}


def test_pyxis_standin_takes_exactly_pyxis_options(slurm_cluster):
    """The stand-in plugin registers pyxis 0.24.0's options (data read from pyxis's args.c), with the same
    arguments, so a pyxis command line that works here has pyxis's flag names and shapes."""
    helptext = slurm_cluster.ssh("srun --help")
    assert helptext.returncode == 0, helptext.stderr
    seen = {m.group(1): m.group(2) for m in re.finditer(r"^\s+(--(?:no-)?container-[a-z-]+)(?:=(\S+))?", helptext.stdout,
                                                         re.M)}
    assert seen == _pyxis_options()


def test_pyxis_flags_run_the_step_inside_the_image(slurm_cluster_clean, sim_cluster):
    c = slurm_cluster_clean
    image = sim_cluster.image("pytorch:20.06-py3").replace("/", "#", 1)     # enroot URI: REGISTRY#IMAGE:TAG
    (c.shared / "mounted.txt").write_text("from the shared filesystem\n")
    step = c.ssh(f"cd {c.shared} && srun -N2 -p {c.partition} --gpus-per-node=8 --container-image={image} "
                 f"--container-mounts={c.shared}:/mnt/shared:ro --container-workdir=/workspace/bert "
                 "--no-container-mount-home bash -c 'echo $SLURMD_NODENAME $PWD $(cat /mnt/shared/mounted.txt); "
                 "test -f run_pretraining.py && echo image-ok'")
    assert step.returncode == 0, step.stderr
    out = sorted(step.stdout.splitlines())
    assert out == ["image-ok", "image-ok", "node1 /workspace/bert from the shared filesystem",
                   "node2 /workspace/bert from the shared filesystem"]
    c.wait_containers(lambda ids: ids == [], timeout=30)     # unnamed containers go with their step


def test_pyxis_image_that_cannot_be_imported_fails_the_step(slurm_cluster_clean):
    c = slurm_cluster_clean
    step = c.ssh(f"cd {c.shared} && srun -N1 -p {c.partition} --container-image=127.0.0.1:5000#nvidia/nosuch:1 true")
    assert step.returncode == 1
    assert "pyxis: failed to start a container of 127.0.0.1:5000#nvidia/nosuch:1" in step.stderr


def test_standin_trainer_runs_as_a_batch_job_in_the_image(slurm_cluster_clean, sim_cluster):
    """sbatch on the login node, one srun step with pyxis flags, 2 nodes x 2 tasks of the stand-in
    trainer (rank and world from Slurm's environment), one log per rank on the shared directory."""
    c = slurm_cluster_clean
    image = sim_cluster.image("pytorch:20.06-py3").replace("/", "#", 1)
    logs = c.shared / "standin-job"
    logs.mkdir(exist_ok=True)
    script = (f"#!/bin/bash\nsrun --container-image={image} --container-mounts={logs}:{logs} --no-container-mount-home "
              f"-o {logs}/rank%t.log bash -c 'dlperf-standin --format pytorch_bert --speed 100 --iters 3 "
              "--time-scale 0 --rank $SLURM_PROCID --world $SLURM_NTASKS --nodes $SLURM_NNODES "
              "--local-rank $SLURM_LOCALID'\n")
    (logs / "job.sh").write_text(script)
    sub = c.ssh(f"cd {logs} && sbatch --parsable -J dlperf-standin -p {c.partition} -A {c.account} --qos={c.qos} "
                f"-N2 --ntasks-per-node=2 --gpus-per-node=8 --exclusive --time=5 {logs}/job.sh")
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip()
    acct = c.wait_sacct(job_id, timeout=120)
    assert (acct["state"], acct["exit"]) == ("COMPLETED", "0:0")
    # the step's row: for a job of a few seconds slurmdbd may keep only the batch host on the allocation row
    step = c.run("sacct", "-n", "-P", "-j", f"{job_id}.0", "-o", "NodeList,NTasks,State").stdout.split()
    assert step == ["node[1-2]|4|COMPLETED"]
    assert sorted(p.name for p in logs.glob("rank*.log")) == [f"rank{r}.log" for r in range(4)]
    final = (logs / "rank0.log").read_text().splitlines()[-1]
    assert "training_sequences_per_second : 100.0" in final
