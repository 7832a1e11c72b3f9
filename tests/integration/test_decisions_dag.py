"""Adaptive trials and node health in the DAG path: the ``dlperf_tensorflow`` DAG through real Airflow (``dag.test()``,
SQLite metadata DB) on the simulated cluster (real sshd nodes, dockerd, registry; GPUs simulated
by the stand-in trainer), a file store (its staging area hands records between the tasks).

* a slow stand-in node (node3 at 80 %) is named by the aggregate step's node health, put into
  the service's quarantine state, and the next DAG run's trials lease around it;
* adaptive trials (conf ``adaptive: true``): a low-noise cell stops after the minimum, the
  trials beyond it record themselves SKIPPED (not needed, not invalid) and the report says why;
* a planted image regression (image B 8 % slower, its own digest) is flagged after publish, the
  trigger step triggers this DAG with conf ``{"confirm": plan}``, and that run (A B A B on one
  pinned node) marks the finding confirmed in the flagged run's annotations.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.history import confirm as C
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.store import Store
from tests.integration.dag_cluster_helpers import cluster_settings, state, task_states
from tests.integration.test_decisions_cluster import BASE, NOISY_PY, ab_suite, history, publish, slow_image  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]


def tf_suite(sim, catalog: Path, *, slow: dict[str, float] | None = None, bz=(32, 48, 64), trials: int = 4,
             noisy: bool = True) -> str:
    """A site catalog suite (DAG ``tensorflow``) on the stand-in: 1n1g cells, each node's python3
    wrapper draws the trial's speed (0.3 % noise) times the node's factor; image = the mirror's."""
    tag = f"dag{int(time.time() * 1000) % 10**8}"
    kw = {}
    if noisy:
        for n in sim.nodes:
            d = Path(n.workdir) / tag
            d.mkdir(parents=True, exist_ok=True)
            (d / "python3").write_text(NOISY_PY.format(f=(slow or {}).get(n.name, 1.0)))
            (d / "python3").chmod(0o755)
        kw = dict(mounts=[f"${{workdir}}/{tag}:/noisy:ro"], launcher={"python": "/noisy/python3"})
    _, path = ab_suite(catalog, tag, **kw)
    data = yaml.safe_load(path.read_text())
    data["batch_sizes"] = {"fp32": list(bz)}
    data["trials"] = trials
    data["container"]["image"] = sim.image(BASE)  # an image_tag override stays pullable from the mirror
    path.write_text(yaml.safe_dump(data))
    return data["id"]


def tf_dag(suite_id: str, cfg):
    from dlperf_tasks.airflow.dag_factory import build_dag

    return build_dag("tensorflow", [load_suite(suite_id)], cfg)


@pytest.fixture
def dag_env(sim_cluster_env, airflow_db, tmp_path, monkeypatch):
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(catalog))
    store_url = f"file://{tmp_path / 'store'}"
    # whole trials in the task (dag.test has no triggerer): DLPERF_DEFER_TRIALS=0 in a deployment
    cfg = cluster_settings(sim_cluster_env.yaml_path, store_url, tmp_path / "work", defer_trials=False)
    return sim_cluster_env, catalog, cfg, Store.from_url(store_url)


def _result(cfg, dr) -> dict:
    (pub,) = json.loads((Path(cfg.work_dir) / "last-tensorflow.json").read_text())["published"]
    assert json.loads(Path(pub["run_dir"], "result.json").read_text())["run"]["dag_run_id"] == dr.run_id
    return json.loads(Path(pub["run_dir"], "result.json").read_text())


def _nodes(result) -> list[tuple[str, list[str]]]:
    return [(t["trial_id"], t["node_names"]) for c in result["cells"] for t in c["trials"]]


def test_dag_slow_node_named_quarantined_and_avoided(dag_env, capsys):
    sim, catalog, cfg, _ = dag_env
    suite_id = tf_suite(sim, catalog, slow={"node3": 0.8}, trials=4)
    dag = tf_dag(suite_id, cfg)
    dr = dag.test(run_conf={"quarantine": True})
    assert state(dr) == "success", task_states(dr)
    res = _result(cfg, dr)
    health = res["run"]["node_health"]
    assert health["suspects"] == ["node3"] and health["quarantined"] == ["node3"], health
    on3 = [t for t, nodes in _nodes(res) if nodes == ["node3"]]
    assert len(on3) == 3, _nodes(res)  # the trials spread over the nodes: each cell once on node3
    (v3,) = [n for n in health["nodes"] if n["node"] == "node3"]
    assert v3["slow_trials"] == 3 and v3["median_slowdown"] == pytest.approx(0.2, abs=0.02), v3
    report = Path(cfg.work_dir, res["run"]["run_id"], "report.md").read_text()
    assert "**node3** suspect (quarantined)" in report and "slower than its peers" in report
    assert not Path(cfg.work_dir, "quarantine.json").exists()  # in the run store: every worker host sees it
    q = Quarantine.for_settings(cfg).nodes()
    assert list(q) == ["node3"] and q["node3"]["run_id"] == res["run"]["run_id"]
    print(f"DAG run 1: node3 named ({v3['evidence'][0][:120]}...) and quarantined")

    # the next DAG run's trials lease around node3: trial 3 would have gone there
    dr2 = dag.test(run_conf={"batch_sizes": [32], "trials": 3})
    assert state(dr2) == "success", task_states(dr2)
    res2 = _result(cfg, dr2)
    assert sorted(n for _, nodes in _nodes(res2) for n in nodes) == ["node1", "node2", "node4"], _nodes(res2)
    from dlperf_tasks.cli import main

    assert main(["cluster", "clear", "node3", "--store", cfg.store_url]) == 0
    assert Quarantine.for_settings(cfg).nodes() == {}


def test_dag_adaptive_trials_stop_low_noise_cells(dag_env):
    sim, catalog, cfg, _ = dag_env
    suite_id = tf_suite(sim, catalog, bz=(32, 48), trials=5)
    # a 2 % CI width: with 0.3 % noise a 3-trial range passes 1 % only ~95 % of the time per cell
    # (a flaky test); 2 % = 6.7 sigma, which a 3-trial range exceeds about once in 10^5 cells
    dr = tf_dag(suite_id, cfg).test(run_conf={"adaptive": 0.02})
    states = task_states(dr)
    assert state(dr) == "success", states
    assert sorted(s for (t, _), s in states.items() if t in ("trial", "trial_more")) == ["success"] * 10
    assert sum(1 for (t, _) in states if t == "trial_more") == 4  # trials 4 and 5 of each cell, mapped after
    res = _result(cfg, dr)
    ada = res["run"]["adaptive"]
    assert ada["trials_max"] == 10 and ada["trials_used"] < 10, ada
    assert ada["saved_fraction"] >= 0.3, ada  # 0.3 % noise: every cell stops after 3 trials
    for c in res["cells"]:
        assert c["n_invalid"] == 0 and c["n_valid"] >= 3, c  # SKIPPED trials are no invalid trials
    by_cell = {c["cell_id"]: c for c in ada["cells"]}
    for c in res["cells"]:
        d = by_cell[c["cell_id"]]
        assert d["trials_used"] == c["n_valid"] and d["reason"], d
        if d["stopped"] == "converged":
            assert d["trials_used"] < 5 and "median CI width" in d["reason"]
    run_dir = Path(cfg.work_dir, res["run"]["run_id"])
    skipped = [json.loads(p.read_text())["trial"] for p in (run_dir / "trials").glob("*.json")]
    assert not [t for t in skipped if t["status"] == "NOT_RUN"]
    skipped = [t for t in skipped if t["status"] == "SKIPPED"]
    assert len(skipped) == ada["saved"] and all(t["reason"] for t in skipped)
    for t in skipped:  # the reason the cell stopped
        assert t["reason"] == by_cell[t["trial_id"].rsplit("/", 1)[0]]["reason"], (t, by_cell)
    report = (run_dir / "report.md").read_text()
    assert "## Adaptive trials" in report and f"Trials used: {ada['trials_used']} of 10" in report
    print(f"adaptive DAG run: {ada['trials_used']} of 10 trials ({ada['saved_fraction'] * 100:.0f} % saved)")


def test_dag_regression_triggers_confirm_run_that_confirms(dag_env, slow_image):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    sim, catalog, cfg, store = dag_env
    base, digest, slow = slow_image
    suite_id = tf_suite(sim, catalog, bz=(32,), trials=3, noisy=False)
    suite = load_suite(suite_id)
    rng = random.Random(7)
    nights = [[round(100.0 * rng.gauss(1.0, 0.003), 2) for _ in range(5)] for _ in range(6)]
    publish(store, history(suite, base, digest, nights), Path(cfg.work_dir) / "seed")
    dag = tf_dag(suite_id, cfg)
    dr = dag.test(run_conf={"image_tag": slow.rsplit(":", 1)[1]})
    states = task_states(dr)
    assert state(dr) == "success", states
    res = _result(cfg, dr)
    (cell,) = res["cells"]
    assert cell["median_speed"] == pytest.approx(92.0, abs=0.05)
    finding = f"throughput:{cell['cell_id']}"
    assert states[("confirm_plan", -1)] == "success" and states[("confirm_trigger", 0)] == "success", states
    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id, DagRun.run_id.like("confirm__%")).all()
        (trig,) = [r for r in runs if res["run"]["run_id"] in r.run_id]
        conf = dict(trig.conf)
    plan = conf["confirm"]
    assert plan["finding"] == finding and plan["run_id"] == res["run"]["run_id"]
    assert plan["run_a"] == f"{suite_id}-night06" and plan["image_b"].endswith(res["run"]["image_digest"].split("@")[1])
    assert plan["image_a"].endswith(digest.split("@")[1])

    # the triggered run (here run with the same conf): A B A B on one pinned node, verdict recorded
    dr2 = dag.test(run_conf=conf)
    states2 = task_states(dr2)
    assert state(dr2) == "success", states2
    assert states2[("publish", -1)] == "skipped" and states2[("confirm_plan", -1)] == "skipped", states2
    assert sorted(s for (t, _), s in states2.items() if t == "trial") == ["success"] * 8
    doc = store.read_annotation(res["run"]["run_id"], C.ANNOTATION)["findings"][finding]
    assert doc["status"] == C.CONFIRMED and doc["effect_pct"] == pytest.approx(-8.0, abs=0.3), doc
    assert doc["values_a"] == pytest.approx([100.0] * 4, abs=0.05) and len(doc["nodes"]) == 1
    assert "image_digest" in doc["env_diff"] and doc["dag_run_id"] == dr2.run_id
    ab = [json.loads(p.read_text())["trial"] for r in doc["ab_runs"].values()
          for p in (Path(cfg.work_dir) / r / "trials").glob("*.json")]
    assert {n for t in ab for n in t["node_names"]} == set(doc["nodes"])  # A and B on the same node
    index = {r["run_id"]: r for r in store.list_runs(suite=suite_id)}
    assert index[res["run"]["run_id"]]["confirmations"] == {finding: C.CONFIRMED}
    assert not any(r in index for r in doc["ab_runs"].values())  # A/B runs are evidence, not published
    print(f"confirm run: {finding} {doc['status']} {doc['effect_pct']:+.2f} % (CI {doc['ci_pct']})")
