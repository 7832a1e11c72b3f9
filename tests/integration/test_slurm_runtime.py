"""The Slurm runtime (remote/slurm_script.py, slurm_jobs.py, slurm_trial.py) on the real test Slurm
(scripts/testslurm: slurmctld, slurmd per simulated node, slurmdbd, MUNGE, a login node over SSH). Trials
run the stand-in trainer (docker/standin) inside the suite's image through the test's pyxis stand-in
(a SPANK plugin taking pyxis's options); GPUs are simulated. What is real: sbatch, srun steps,
squeue/sacct, scancel, the per-rank logs on the shared directory and their parsing."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.remote import slurm_jobs, slurm_trial
from dlperf_tasks.remote.slurm_inventory import SlurmCluster, enroot_uri
from dlperf_tasks.remote.slurm_script import options_of
from dlperf_tasks.remote.ssh import SSHPool

pytestmark = [pytest.mark.cluster, pytest.mark.slurm]


@pytest.fixture
def login(slurm_cluster_clean):
    cluster = SlurmCluster.from_yaml(slurm_cluster_clean.yaml_path)
    with SSHPool(cluster.login_cluster()) as pool:
        yield cluster, pool, cluster.login_names[0]


def _suite(**env):
    base = load_suite("pytorch-bert")
    e = {"DLPERF_STANDIN_TIME_SCALE": "0.02", **env}
    return dataclasses.replace(base, env=e, env_multi_node={}, window=Window(5, 20), timeout_s=120, hang_timeout_s=60)


def _trial(suite, topo: str) -> Trial:
    return Trial(Cell(suite.id, suite.framework, suite.model, "fp32", 32, Topology.parse(topo), window=suite.window), 1)


def _wait(pool, login, job_id, done, timeout=120.0) -> slurm_jobs.JobState:
    deadline = time.monotonic() + timeout
    while True:
        st = slurm_trial.poll(pool, login, [job_id]).get(job_id)
        if st is not None and done(st):
            return st
        assert time.monotonic() < deadline, f"job {job_id}: {st}"
        time.sleep(0.5)


def _queue_empties(c, timeout: float = 60.0) -> None:
    """squeue lists no job any more (an ended job stays COMPLETING while its epilog runs)."""
    deadline = time.monotonic() + timeout
    while c.jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert c.jobs() == []


def _job_output(pool, host, job, job_id) -> str:
    """The batch script's own output and node 0's rank log (shown when a job fails)."""
    parts = [pool.read(host, f"{job.log_dir}/{name}") or b"" for name in (f"slurm-{job_id}.out", "rank-node0.log")]
    return b"\n".join(parts).decode(errors="replace")[-3000:]


def _submit(cluster, pool, login, suite, trial, image, **opts):
    o = dataclasses.replace(options_of(cluster.slurm), **opts)
    slurm_trial.prepare(pool, login, o, suite)
    job = slurm_trial.build_job(trial, suite, "slurmrun", o, image=image, gpus_per_node=trial.cell.topology.gpus_per_node)
    return job, slurm_trial.submit(pool, login, job)


def _registry_digest(sim, image: str) -> str:
    """The test registry's digest of ``image`` (sha256:...): its answer to a manifest request (what enroot asks)."""
    import base64
    import urllib.request

    env = sim.env
    registry, _, rest = image.partition("/")
    repo, _, tag = rest.rpartition(":")
    auth = base64.b64encode(f"{env['DLPERF_REGISTRY_USER']}:{env['DLPERF_REGISTRY_PASSWORD']}".encode()).decode()
    req = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{tag}", method="HEAD", headers={
        "Authorization": f"Basic {auth}",
        "Accept": ", ".join(["application/vnd.oci.image.index.v1+json",
                             "application/vnd.docker.distribution.manifest.list.v2+json",
                             "application/vnd.docker.distribution.manifest.v2+json",
                             "application/vnd.oci.image.manifest.v1+json"])})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.headers["Docker-Content-Digest"]


def test_two_node_trial_runs_as_a_job_its_logs_gate_as_on_docker_and_the_imported_digest_is_kept(login, sim_cluster,
                                                                                               tmp_path):
    """The catalog pins the image's digest: pyxis is given the digest reference, each node's record keeps the
    digest pyxis says it imported there, and a trial whose nodes imported another digest is refused. A job
    pinned to a digest the registry does not have, beside it, cannot run another image: its import fails.
    The suite declares the interconnect probe: nccl-tests runs first as an ``srun --mpi=pmix`` step in the
    image on both nodes, and its bus bandwidth (the stand-in's links: 150 GB/s) is flagged below its bound."""
    cluster, pool, host = login
    image = sim_cluster.image("pytorch:20.06-py3")
    digest = _registry_digest(sim_cluster, image)
    base = _suite(DLPERF_STANDIN_SPEED_2N1G="123.45")
    probe = {"expected_busbw_gbs": 400.0, "max_bytes": "64M", "timeout_s": 90, "env": {"DLPERF_STANDIN_ALGBW": "150"}}
    suite = dataclasses.replace(base, container=dataclasses.replace(base.container, digest=digest),
                                extra={**(base.extra or {}), "interconnect_probe": probe})
    wrong = dataclasses.replace(base, container=dataclasses.replace(base.container, digest="sha256:" + "0" * 64))
    trial, other = _trial(suite, "2n1g"), _trial(wrong, "1n1g")
    job, job_id = _submit(cluster, pool, host, suite, trial, image)
    assert f"--container-image={enroot_uri(image)}@{digest}" in job.srun_lines[-1], job.srun_lines[-1]
    bad_job, bad_id = _submit(cluster, pool, host, wrong, other, image)
    st = _wait(pool, host, job_id, lambda s: not s.active and s.source == "sacct")
    assert slurm_jobs.end_status(st) == (None, ""), _job_output(pool, host, job, job_id)
    rec = slurm_jobs.trial_record(st)
    assert rec["state"] == "COMPLETED" and rec["exit_code"] == 0 and rec["queue_s"] is not None
    res = slurm_trial.gate_job(pool, host, job.log_dir, trial, st, tmp_path, time.time(), pinned=digest)
    assert res.status == TrialStatus.OK, res.reason
    assert res.metric.value == pytest.approx(123.45)
    # named by the batch script's node list (sacct's final row may name only the nodes still completing)
    assert len(res.node_env) == 2 and set(res.node_env) <= {"node1", "node2", "node3", "node4"}, res.node_env
    assert all(e == {"gpu_model": None, "image_digest": digest} for e in res.node_env.values()), res.node_env
    assert any("--mpi=pmix" in line and "probe.log" in line for line in job.script.splitlines()), job.script
    ic = res.interconnect
    assert ic is not None and ic.get("error") is None, ic
    assert ic["nodes"] == list(res.node_env) and len(ic["nodes"]) == 2, ic
    assert ic["nranks"] == 2 and ic["transports"] == ["NET/IB"] and ic["sizes"][-1]["bytes"] == 64 << 20, ic
    assert ic["busbw_gbs"] == pytest.approx(ic["sizes"][-1]["algbw_gbs"]) and 100 < ic["busbw_gbs"] < 200, ic
    assert ic["flags"] == [f"interconnect probe: bus bandwidth {ic['busbw_gbs']:.1f} GB/s is below 80% of the "
                           "expected 400.0 GB/s"]
    refused = slurm_trial.gate_job(pool, host, job.log_dir, trial, st, tmp_path / "again", time.time(),
                                   pinned="sha256:" + "b" * 64)
    assert refused.status == TrialStatus.LAUNCH_FAILED and "trial refused" in refused.reason, refused.reason
    assert f"imported {digest}" in refused.reason and not refused.valid
    bad = _wait(pool, host, bad_id, lambda s: not s.active and s.source == "sacct")
    res = slurm_trial.gate_job(pool, host, bad_job.log_dir, other, bad, tmp_path / "bad", time.time(),
                               pinned=slurm_trial.pinned_digest(wrong, options_of(cluster.slurm), image))
    assert not res.valid and res.status != TrialStatus.OK, (res.status, res.reason)
    assert all(e["image_digest"] is None for e in res.node_env.values()), res.node_env


def test_busy_partition_shows_the_pending_reason_and_cancel_leaves_nothing(login, slurm_cluster_clean, sim_cluster):
    cluster, pool, host = login
    c = slurm_cluster_clean
    suite = _suite(DLPERF_STANDIN_TIME_SCALE="50")  # trains for minutes unless cancelled
    image = sim_cluster.image("pytorch:20.06-py3")
    _, first = _submit(cluster, pool, host, suite, _trial(suite, "1n1g"), image, partition=c.small_partition)
    _wait(pool, host, first, lambda s: s.state == "RUNNING")
    _, second = _submit(cluster, pool, host, suite, _trial(suite, "1n1g"), image, partition=c.small_partition)
    pending = _wait(pool, host, second, lambda s: s.state == "PENDING" and s.reason in ("Resources", "Priority"))
    assert slurm_jobs.pending_note(pending) in ("pending (Resources)", "pending (Priority)")
    slurm_trial.cancel(pool, host, [first, second])
    for job_id in (first, second):
        st = _wait(pool, host, job_id, lambda s: not s.active and s.source == "sacct")
        status, reason = slurm_jobs.end_status(st)
        assert status == TrialStatus.NOT_RUN and "CANCELLED" in reason
    _queue_empties(c)  # sacct has the end while squeue still shows the job COMPLETING (its epilog)
    c.wait_containers(lambda ids: ids == [], timeout=30)


def test_bad_partition_is_refused_at_submission(login, slurm_cluster_clean, sim_cluster):
    cluster, pool, host = login
    suite = _suite()
    with pytest.raises(Exception, match="invalid partition specified: nosuch"):
        _submit(cluster, pool, host, suite, _trial(suite, "1n1g"), sim_cluster.image("pytorch:20.06-py3"),
                partition="nosuch")
    assert slurm_cluster_clean.jobs() == []


def test_sweep_runs_every_trial_as_a_job_and_writes_the_usual_result(slurm_cluster_clean, sim_cluster, tmp_path):
    """engine.sweep.run_sweep on the Slurm cluster file: two cells (1n1g, 2n1g), a job each, result.json and
    report.md as on the Docker runtime, each job's accounting in slurm_jobs.json. The sweep is pinned to
    ``node[3-4]`` as an A/B confirmation pins its later rounds to the Slurm node list its first round got
    (engine/abconfirm.run_ab passes the trial records' node lists on as ``SweepOptions.nodes``)."""
    import json

    from dlperf_tasks.catalog.overrides import Overrides
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.engine.sweep import SweepOptions, run_sweep

    # the seed's gradient accumulation makes a 1n1g step thousands of samples: a smaller time scale
    suite = _suite(DLPERF_STANDIN_SPEED_1N1G="100", DLPERF_STANDIN_SPEED_2N1G="190", DLPERF_STANDIN_TIME_SCALE="0.0002")
    the_plan = plan(suite, Overrides(topologies=("1n1g", "2n1g"), batch_sizes=(32,), precisions=("fp32",), trials=1))
    cluster = SlurmCluster.from_yaml(slurm_cluster_clean.yaml_path)
    res = run_sweep(suite, the_plan, cluster, tmp_path / "out",
                    SweepOptions(image=sim_cluster.image("pytorch:20.06-py3"), poll_s=0.5, retries=0,
                                 progress=sys.stderr, nodes=["node[3-4]"]))
    assert len(res.ran) == len(the_plan.trials) >= 2
    logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(res.out_dir.rglob("*.log")))
    assert {r.status for r in res.ran} == {TrialStatus.OK}, ([r.reason for r in res.ran], logs)
    assert {round(r.metric.value, 2) for r in res.ran} == {100.0, 190.0}
    assert (res.out_dir / "result.json").exists() and (res.out_dir / "report.md").exists()
    jobs = json.loads((res.out_dir / "slurm_jobs.json").read_text())
    assert [rec[0]["state"] for rec in jobs.values()] == ["COMPLETED"] * len(the_plan.trials)
    hosts = {h for rec in jobs.values() for h in slurm_cluster_clean.run("scontrol", "show", "hostnames",
                                                                         rec[0]["nodes"]).stdout.split()}
    assert hosts == {"node3", "node4"}, jobs  # the 2-node cell on both, the others on either
    assert sorted(n for r in res.ran for n in r.nodes) == sorted(rec[0]["nodes"] for rec in jobs.values())
    assert slurm_cluster_clean.jobs() == []


def test_a_node_dying_mid_trial_ends_node_fail_and_a_trial_over_its_time_limit_ends_timeout(login, slurm_cluster_clean,
                                                                                          sim_cluster, tmp_path):
    """Two trials side by side, so the TIMEOUT waits no longer than the NODE_FAIL does: a 2-node trial whose
    node dies, and a 1-node trial submitted with the cluster file's per-trial limit (``--time=1``). Slurm's
    limits are whole minutes; the test moves that job's end to now (``scontrol update EndTime``) instead of
    waiting the minute, and Slurm's own limit check ends it TIMEOUT (checked every 30 s, then KillWait)."""
    cluster, pool, host = login
    c = slurm_cluster_clean
    suite = _suite(DLPERF_STANDIN_TIME_SCALE="50")  # both would train for minutes
    image = sim_cluster.image("pytorch:20.06-py3")
    _, job_id = _submit(cluster, pool, host, suite, _trial(suite, "2n1g"), image)
    slow = _trial(suite, "1n1g")
    slow_job, slow_id = _submit(cluster, pool, host, suite, slow, image, time_limit="1")
    running = _wait(pool, host, job_id, lambda s: s.state == "RUNNING")
    _wait(pool, host, slow_id, lambda s: s.state == "RUNNING")
    assert "TimeLimit=00:01:00" in c.run("scontrol", "show", "job", slow_id).stdout
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 2))
    c.run("scontrol", "update", f"JobId={slow_id}", f"EndTime={soon}")
    victim = c.run("scontrol", "show", "hostnames", running.nodes).stdout.split()[-1]
    with c.slurmd_killed(victim):
        st = _wait(pool, host, job_id, lambda s: not s.active and s.source == "sacct", timeout=90)
        status, reason = slurm_jobs.end_status(st)
        assert status == TrialStatus.NODE_UNREACHABLE and "NODE_FAIL" in reason, reason
        assert status.retriable
    timed = _wait(pool, host, slow_id, lambda s: not s.active and s.source == "sacct", timeout=90)
    res = slurm_trial.gate_job(pool, host, slow_job.log_dir, slow, timed, tmp_path, time.time() - 60)
    assert res.status == TrialStatus.TIMEOUT and res.status.retriable, (res.status, res.reason)
    assert res.reason.startswith(f"slurm job {slow_id} TIMEOUT") and not res.valid, res.reason
    _queue_empties(c)  # the dead node's epilog runs once its slurmd is back (the job is COMPLETING until then)
    c.wait_containers(lambda ids: ids == [], timeout=30)
