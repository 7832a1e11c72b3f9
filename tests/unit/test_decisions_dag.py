"""Issue 17 in the DAG path, the engine-side pieces without a cluster: the adaptive skip of a
mapped trial (real run dir, real file store staging), lease candidates (quarantine, pinned A/B
nodes, spreading), the confirm trigger confs from a seeded store with a planted regression, the
A/B run set (interleaved, both images) and the verdict recorded from A/B trial records."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlperf_tasks.engine import abdag, dagdecisions as dd
from dlperf_tasks.policy.adaptive import AdaptivePolicy
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.engine.setup import plan_runs
from dlperf_tasks.history import check, confirm as C
from dlperf_tasks.core.model import MetricKind, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.engine.placement import usable_nodes
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.store import Store
from tests.fixtures import synth
from tests.unit.test_history_confirm import CELL, NEW_DIGEST


def _ok(trial: Trial, v: float, node: str = "local0") -> TrialResult:
    return TrialResult(trial, TrialStatus.OK, metric=TrialMetric(v, MetricKind.THROUGHPUT), nodes=[node])


@pytest.fixture()
def local(tmp_path):
    return Settings.load(cluster="local", store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "work"))


def _planned(settings, **params):
    rs = plan_runs("smoke", ["smoke"], {"trials": 5, **params}, settings)
    (run,) = rs.runs
    # dagdecisions reads the items' dict form (what the trial step hands it)
    items = [i.to_dict() for i in rs.trials if i.trial.cell == rs.trials[0].trial.cell]
    return RunDir(Path(run.run_dir), run.run_id), items


def test_stop_reason_rules():
    pol = AdaptivePolicy()
    cell = Trial.from_dict(_cell_trial()).cell
    t = [Trial(cell, i) for i in range(1, 6)]
    assert dd.stop_reason(t[3], [_ok(t[0], 100.0), _ok(t[1], 100.2), _ok(t[2], 99.9)], pol, 5).startswith(
        "median CI width 0.30 %")
    assert dd.stop_reason(t[3], [_ok(t[0], 100.0), _ok(t[1], 104.0), _ok(t[2], 99.9)], pol, 5) is None
    assert dd.stop_reason(t[3], [_ok(t[0], 100.0), None, _ok(t[2], 99.9)], pol, 5) is None  # 2 < minimum
    assert "maximum of 3" in dd.stop_reason(t[3], [], AdaptivePolicy(max_trials=3), 5)
    skip = TrialResult(t[3], TrialStatus.NOT_RUN, f"{dd.SKIP_PREFIX}: median CI width 0.30 % <= 1 %)")
    assert dd.stop_reason(t[4], [None, None, None, skip], pol, 5) == \
        "the cell stopped before trial 4: median CI width 0.30 % <= 1 %"
    assert dd.is_skip(skip) and dd.is_skip({"trial": {"status": "NOT_RUN", "reason": skip.reason}})
    assert dd.drop_skipped([None, {"trial": {"status": "OK"}}, {"trial": {"status": "NOT_RUN", "reason": skip.reason}}]) \
        == [{"trial": {"status": "OK"}}]


def _cell_trial():
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.plan import plan

    return plan(load_suite("smoke"), {"trials": 5}).trials[0].trial.to_dict()


def test_adaptive_skip_reads_the_cells_records(local):
    rd, items = _planned(local, adaptive=True)
    trials = [Trial.from_dict(i["trial"]) for i in items]
    assert dd.adaptive_skip(items[2], rd, local) is None  # within the minimum: always runs
    for t, v in zip(trials[:3], (100.0, 100.3, 99.8)):
        rd.save_trial(_ok(t, v))
    rec = dd.adaptive_skip(items[3], rd, local)
    assert rec["trial"]["status"] == "NOT_RUN" and rec["trial"]["reason"].startswith("not needed (adaptive stop: ")
    assert dd.is_skip(rd.load_trial(trials[3]))
    assert dd.adaptive_skip(items[4], rd, local)["trial"]["reason"].startswith(
        "not needed (adaptive stop: the cell stopped before trial 4")
    summary = dd.adaptive_summary(trials, [rd.load_trial(t) for t in trials if rd.load_trial(t)], AdaptivePolicy())
    (c,) = summary["cells"]
    assert (c["trials_used"], c["max_trials"], c["stopped"], summary["saved"]) == (3, 5, "converged", 2)
    # off by default (the smoke suite has no adaptive field): trial 4 of a wide cell runs
    rd2, items2 = _planned(local)
    assert dd.adaptive_skip(items2[3], rd2, local) is None


def test_usable_nodes_quarantine_pins_and_spread(tmp_path):
    cluster = Cluster.from_dict({"nodes": [{"name": f"node{i}", "host": f"127.0.0.{i}", "gpus": 8} for i in range(1, 5)]})
    settings = Settings.load(cluster="local", store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "work"))
    rd = RunDir.at(tmp_path / "run", "r-20260101T000000-abcdef")
    t = Trial.from_dict(_cell_trial())
    assert usable_nodes(cluster, Trial(t.cell, 3), rd, settings) == ["node3", "node4", "node1", "node2"]
    Quarantine.for_settings(settings).add("node3", ["slow"], "r0")
    assert usable_nodes(cluster, Trial(t.cell, 3), rd, settings) == ["node4", "node1", "node2"]
    rd.write("plan.json", {"nodes": ["node2"]})
    assert usable_nodes(cluster, Trial(t.cell, 3), rd, settings) == ["node2"]


def test_trigger_plan_and_verdict_from_a_seeded_store(tmp_path):
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, synth.nightly_results(9, plant={8: {CELL: 0.92}}, digest_changes={8: NEW_DIGEST},
                                                        trial_noise=0.005), str(tmp_path / "seed"))
    rep = check.check_run(store, ids[8], log=None, notify_target="")
    published = [{"run_id": ids[8], "suite": "mxnet-bert", "regressions": {"findings": len(rep.findings)}}]
    confs = abdag.trigger_confs({"runs": []}, published, store)
    (c,) = confs
    assert c["trigger_run_id"].startswith(f"confirm__{ids[8]}__") and c["conf"]["confirm"]["finding"] == f"throughput:{CELL}"
    assert abdag.trigger_confs({"confirm": {}}, published, store) == []  # a confirmation run triggers nothing
    from dlperf_tasks.airflow.params import validate_conf

    params = validate_conf(c["conf"], ["mxnet-bert"])
    settings = Settings.load(cluster="local", store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "w"))
    rs = abdag.plan_confirm("mxnet", ["mxnet-bert"], params, settings, group_run_id="manual__x")
    assert [(i["run_id"] == rs["runs"][0]["run_id"], i["trial"]["index"]) for i in rs["trials"]] == \
        [(True, 1), (False, 1), (True, 2), (False, 2), (True, 3), (False, 3), (True, 4), (False, 4)]
    assert [r["image"] for r in rs["runs"]] == [params["confirm"]["image_a"], params["confirm"]["image_b"]]
    assert abdag.plan_confirm("mxnet", ["mxnet-bert"], params, settings, "manual__x")["runs"] == rs["runs"]  # re-run
    for item in rs["trials"]:  # the A/B trials' records (B 8 % slower)
        rd = RunDir(Path(item["run_dir"]), item["run_id"])
        b = item["run_id"] == rs["runs"][1]["run_id"]
        rd.save_trial(_ok(Trial.from_dict(item["trial"]), (92.0 if b else 100.0) + item["trial"]["index"] * 0.1))
    doc = abdag.finish_confirm({k: v for k, v in rs.items() if k != "trials"}, store, notify_target="")
    assert doc["status"] == C.CONFIRMED and doc["effect_pct"] == pytest.approx(-8.0, abs=0.3)
    assert store.read_annotation(ids[8], C.ANNOTATION)["findings"][f"throughput:{CELL}"]["status"] == C.CONFIRMED
    assert abdag.trigger_confs({"runs": []}, published, store) == []  # confirmed: not planned again
