"""The DAG's A/B confirmation run on the real test Slurm (scripts/testslurm; docs/slurm-runtime.md): the
``dlperf_pytorch`` DAG through real Airflow (``dag.test()``) with the conf the flagged run's trigger step
hands on (``{"confirm": plan}``), the cluster setting naming the Slurm cluster file.

The store holds six nights of the 1n1g cell on image A (the stand-in image) and a seventh on image B,
flagged by the real regression check. Image B is the stand-in image with its trainer's default speed 8 %
lower (its shim patched, committed and pushed under its own tag: its own digest); the suite sets no speed,
so each image's trainer decides, as a real image regression would. Checked: the plan step pins the nodes
from sinfo (idle ones first: node1 is busy with another job then, so node2), every A and B trial job runs
on the pinned node only (``--exclude`` of the partition's others, in the log and in sacct), although node1
is free by the time they run, and the verdict lands in the flagged run's annotations as on the Docker
runtime. And engine-level: a partition with too few usable nodes is one line naming each node left out
(quarantined, drained with Slurm's reason), nothing submitted.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.history import check, confirm as C
from dlperf_tasks.store import Store
from dlperf_tasks.store.quarantine import Quarantine
from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog, state, task_states
from tests.integration.test_decisions_cluster import _docker, history, publish
from tests.integration.test_slurm_dag import _when

pytestmark = [pytest.mark.cluster, pytest.mark.slurm, pytest.mark.airflow]

BASE = "pytorch:20.06-py3"
SHIM = "/usr/lib/python3/dist-packages/dlperf_standin_shims.py"


def _catalog(dir_: Path, topology: str) -> Path:
    """pytorch-bert with one cell (fp32, batch 32, ``topology``) and no speed: the image's trainer decides."""
    site_catalog(dir_, "pytorch-bert", {topology: 0.0})
    path = dir_ / "pytorch-bert.yaml"
    data = yaml.safe_load(path.read_text())
    data["env"] = {k: v for k, v in data["env"].items() if not k.startswith("DLPERF_STANDIN_SPEED")}
    data["batch_sizes"], data["precisions"] = {"fp32": [32]}, ["fp32"]
    path.write_text(yaml.safe_dump(data))
    return dir_


def _repo_digest(ref: str) -> str:
    repo = ref.rsplit(":", 1)[0] + "@"
    (digest,) = [d for d in _docker("inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", ref).split()
                 if d.startswith(repo)]
    return digest


@pytest.fixture
def images(sim_cluster_env, docker_config, tmp_path):
    """(image A by digest, image B by digest): B's trainer runs at 92 samples/s per GPU by default, A's at 100."""
    env = sim_cluster_env.env
    _docker("login", "-u", env["DLPERF_REGISTRY_USER"], "--password-stdin", env["DLPERF_REGISTRY"],
            input=env["DLPERF_REGISTRY_PASSWORD"])
    base = sim_cluster_env.image(BASE)
    _docker("pull", "-q", base)
    slow = base.rsplit(":", 1)[0] + f":20.06-slow{int(time.time())}"
    cid = _docker("create", base, "true")
    try:
        _docker("cp", f"{cid}:{SHIM}", str(tmp_path / "shim.py"))
        text = (tmp_path / "shim.py").read_text()
        old = '_env_num("DLPERF_STANDIN_SPEED_PER_GPU", default=100.0)'
        assert old in text
        (tmp_path / "shim.py").write_text(text.replace(old, old.replace("100.0", "92.0")))
        _docker("cp", str(tmp_path / "shim.py"), f"{cid}:{SHIM}")
        _docker("commit", cid, slow)
    finally:
        _docker("rm", cid)
    _docker("push", "-q", slow)
    try:
        return _repo_digest(base), _repo_digest(slow)
    finally:
        _docker("rmi", slow)


def _flagged(store: Store, suite, image_a: str, image_b: str, work: Path) -> dict:
    """Six clean nights on A and a seventh on B, published; the regression check flags the seventh; the
    conf its trigger step hands on (two rounds)."""
    rng = random.Random(7)
    nights = [[round(100.0 * rng.gauss(1.0, 0.003), 2) for _ in range(5)] for _ in range(6)]
    publish(store, history(suite, image_a.split("@")[0], image_a, nights), work)
    (flagged,) = publish(store, history(suite, image_b.split("@")[0], image_b, [[92.0] * 5], start_day=7), work)
    rep = check.check_run(store, flagged, log=None, notify_target="")
    assert len(rep.findings) == 1, rep
    plan = C.plan_confirmation(store.read_annotation(flagged, "regressions"), 0, store.list_runs(suite=suite.id),
                               rounds=2)
    return plan.to_conf()


def test_dag_confirmation_run_pins_nodes_from_sinfo_and_records_the_verdict(airflow_db, slurm_cluster_clean, images,
                                                                           tmp_path, monkeypatch, caplog, capfd):
    c = slurm_cluster_clean
    image_a, image_b = images
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(_catalog(tmp_path / "catalog", "1n1g")))
    store_url = f"file://{tmp_path / 'store'}"
    store = Store.from_url(store_url)
    conf = _flagged(store, load_suite("pytorch-bert"), image_a, image_b, tmp_path / "seed")
    finding, flagged = conf["confirm"]["finding"], conf["confirm"]["run_id"]
    work = tmp_path / "work"
    cfg = cluster_settings(c.yaml_path, store_url, work, trial_poll_s=0.5)
    c.wait_node("node2", lambda s: s == "idle")  # an earlier test's job may still be completing there
    blocker = c.ssh(f"sbatch --parsable -p {c.small_partition} -A {c.account} --qos {c.qos} -N1 --exclusive "
                    f"-J blocker --wrap 'sleep 300'", check=True).stdout.strip()
    c.wait_job(blocker, "RUNNING")  # node1 busy while the plan step picks
    freed: dict = {}

    def free_node1() -> None:
        try:
            _when(lambda: list(work.glob("*/plan.json")), 120, "the A/B plan")
            c.ssh(f"scancel {blocker}", check=True)
            freed["state"] = c.wait_node("node1", lambda s: s == "idle", timeout=60)
        except AssertionError as exc:
            freed["error"] = str(exc)
        finally:
            c.ssh(f"scancel {blocker}")

    th = threading.Thread(target=free_node1, daemon=True)
    th.start()
    caplog.set_level(logging.INFO)
    dr = build_pytorch_dag(cfg).test(run_conf=conf)
    th.join(timeout=60)
    states = task_states(dr)
    assert "error" not in freed and freed.get("state") == "idle", freed
    assert state(dr) == "success", states
    assert states[("publish", -1)] == "skipped" and states[("confirm_plan", -1)] == "skipped", states
    assert sorted(s for (t, _), s in states.items() if t == "trial") == ["success"] * 4

    doc = store.read_annotation(flagged, C.ANNOTATION)["findings"][finding]
    assert doc["nodes"] == ["node2"] and doc["dag_run_id"] == dr.run_id, doc
    assert doc["values_a"] == pytest.approx([100.0] * 2) and doc["values_b"] == pytest.approx([92.0] * 2), doc
    assert doc["status"] == C.CONFIRMED and doc["effect_pct"] == pytest.approx(-8.0, abs=0.01), doc
    assert doc["image_a"] == image_a and doc["image_b"] == image_b
    index = {r["run_id"]: r for r in store.list_runs(suite="pytorch-bert")}
    assert index[flagged]["confirmations"] == {finding: C.CONFIRMED}
    assert not any(r in index for r in doc["ab_runs"].values())  # A/B runs are evidence, not published
    for run_id in doc["ab_runs"].values():
        assert json.loads((work / run_id / "plan.json").read_text())["nodes"] == ["node2"]
    trials = [json.loads(p.read_text())["trial"] for r in doc["ab_runs"].values()
              for p in sorted((work / r / "trials").glob("*.json"))]
    assert len(trials) == 4 and {t["status"] for t in trials} == {"OK"}, trials
    for t in trials:  # every A and B job on the pinned node, in the record and in Slurm's accounting
        (job,) = t["exit_codes"]
        assert t["node_names"] == ["node2"] and c.wait_sacct(job.split()[1])["nodes"] == "node2", t
    out, err = capfd.readouterr()
    text = caplog.text + out + err
    assert text.count("Slurm job pinned to node2 (--exclude of the partition's other nodes)") == 4, text[-3000:]
    assert "--exclude=node1,node3,node4" in text, text[-3000:]
    assert c.jobs() == []


def test_too_few_usable_nodes_is_one_line_naming_each_node_left_out(slurm_cluster_clean, tmp_path, monkeypatch):
    """Engine-level plan step (no Airflow): a 4-node cell, node1 quarantined, node2 drained by the admin."""
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.engine import abconfirm
    from dlperf_tasks.engine.errors import NonRetriable

    c = slurm_cluster_clean
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(_catalog(tmp_path / "catalog", "4n1g")))
    cfg = cluster_settings(c.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work")
    Quarantine.for_settings(cfg).add("node1", ["test: slow"])
    suite = load_suite("pytorch-bert")
    (cell,) = plan(suite).cells
    p = C.ConfirmPlan(suite=suite.id, run_id="flagged", finding=f"throughput:{cell.id}", kind="throughput",
                      cell_id=cell.id, cells=[cell.id], image_a="r/x@sha256:" + "a" * 64,
                      image_b="r/x@sha256:" + "b" * 64, run_a="good", rounds=2)
    c.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=dlperf test: bad fan")
    try:
        c.wait_node("node2", lambda s: s.startswith("drain"))
        with pytest.raises(NonRetriable) as exc:
            abconfirm.plan_confirm("pytorch", [suite.id], p.to_conf(), cfg, "confirm__x")
    finally:
        c.run("scontrol", "update", "NodeName=node2", "State=RESUME")
        c.wait_node("node2", lambda s: s == "idle")
    assert str(exc.value) == (
        "A/B confirmation needs 4 node(s) with 1 GPU(s) in Slurm partition gpu; 2 usable (node3, node4); not usable: "
        "node1 is quarantined (dlperf cluster clear NODE); node2 is drained (dlperf test: bad fan)")
    assert not list((tmp_path / "work").glob("*/plan.json")) and c.jobs() == []
