"""The real test Slurm (scripts/testslurm, docs/slurm.md): Debian's slurmctld + one slurmd per
simulated node + slurmdbd + MUNGE, reached through a login node over SSH. The GPUs are simulated
(gres backed by /dev/null-like devices); everything else here is the real Slurm."""

import pytest

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


def test_killed_slurmd_shows_the_node_not_responding_then_back(slurm_cluster_clean):
    c = slurm_cluster_clean
    with c.slurmd_killed("node4"):
        state = c.wait_node("node4", lambda s: s.endswith("*") or s.startswith("down"), timeout=90)
        assert state != "idle"
        assert c.node_states()["node3"] == "idle"      # only that node
    assert c.node_states()["node4"] == "idle"
