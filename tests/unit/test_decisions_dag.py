"""Adaptive trials and node health in the DAG path, the engine-side pieces without a cluster: the decisions' hook before
a mapped trial (real run dir, real file store staging; SKIPPED status, old records still readable) and lease candidates (quarantine, pinned A/B
nodes, spreading). The A/B confirmation's DAG pieces: tests/unit/test_abconfirm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import json

from dlperf_tasks.engine import decisions as D
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.engine.trials import before_trial, start_item
from dlperf_tasks.report.result_json import trial_from_record, trial_record
from dlperf_tasks.policy.adaptive import AdaptivePolicy
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.engine.setup import plan_runs
from dlperf_tasks.core.model import MetricKind, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.store.quarantine import Quarantine
from dlperf_tasks.engine.placement import usable_nodes
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.core.settings import Settings


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
    assert D.stop_reason(t[3], [_ok(t[0], 100.0), _ok(t[1], 100.2), _ok(t[2], 99.9)], pol, 5).startswith(
        "median CI width 0.30 %")
    assert D.stop_reason(t[3], [_ok(t[0], 100.0), _ok(t[1], 104.0), _ok(t[2], 99.9)], pol, 5) is None
    assert D.stop_reason(t[3], [_ok(t[0], 100.0), None, _ok(t[2], 99.9)], pol, 5) is None  # 2 < minimum
    assert "maximum of 3" in D.stop_reason(t[3], [], AdaptivePolicy(max_trials=3), 5)
    skip = TrialResult(t[3], TrialStatus.SKIPPED, "median CI width 0.30 % <= 1 %")
    assert D.stop_reason(t[4], [None, None, None, skip], pol, 5) == "median CI width 0.30 % <= 1 %"  # the cell's
    assert D.is_skipped(skip) and D.is_skipped({"trial": {"status": "SKIPPED", "reason": skip.reason}})
    assert not D.is_skipped(TrialResult(t[3], TrialStatus.NOT_RUN, "dry run"))
    assert D.drop_skipped([None, {"trial": {"status": "OK"}}, {"trial": {"status": "SKIPPED", "reason": skip.reason}}]) \
        == [{"trial": {"status": "OK"}}]


def test_old_not_needed_records_read_as_skipped(tmp_path):
    """Records written before status SKIPPED (NOT_RUN "not needed (adaptive stop: WHY)") stay readable."""
    cell = Trial.from_dict(_cell_trial()).cell
    rd = RunDir.at(tmp_path / "run", "r-20260101T000000-abcdef")
    old = trial_record(TrialResult(Trial(cell, 4), TrialStatus.NOT_RUN,
                                   "not needed (adaptive stop: median CI width 0.30 % <= 1 %)"))
    rd.trial_file(Trial(cell, 4)).parent.mkdir(parents=True)
    rd.trial_file(Trial(cell, 4)).write_text(json.dumps(old))
    r = rd.load_trial(Trial(cell, 4))
    assert (r.status, r.reason) == (TrialStatus.SKIPPED, "median CI width 0.30 % <= 1 %")
    assert rd.load_trial(Trial(cell, 4)).status == TrialStatus.SKIPPED  # also through load_trials
    assert D.stop_reason(Trial(cell, 5), [None, None, None, r], AdaptivePolicy(), 5) == "median CI width 0.30 % <= 1 %"
    stopped = TrialResult(Trial(cell, 1), TrialStatus.NOT_RUN, "stopped")  # any other NOT_RUN stays NOT_RUN
    assert trial_from_record(trial_record(stopped)).status == TrialStatus.NOT_RUN


def _cell_trial():
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.plan import plan

    return plan(load_suite("smoke"), {"trials": 5}).trials[0].trial.to_dict()


def test_adaptive_skip_reads_the_cells_records(local):
    rd, items = _planned(local, adaptive=True)
    trials = [Trial.from_dict(i["trial"]) for i in items]
    suite = load_suite("smoke", local.catalog_path)

    def skip(i: int, run_dir=rd):
        return before_trial(items[i], trials[i], suite, run_dir, local)

    assert skip(2) is None  # within the minimum: always runs
    for t, v in zip(trials[:3], (100.0, 100.3, 99.8)):
        rd.save_trial(_ok(t, v))
    rec = skip(3)
    assert rec.status == TrialStatus.SKIPPED and rec.reason.startswith("median CI width ")
    assert D.is_skipped(rd.load_trial(trials[3])) and rd.load_trial(trials[3]).reason == rec.reason
    assert skip(4).reason == rec.reason  # the reason the cell stopped
    # the trial step returns the record (what collect drops)
    assert D.drop_skipped([start_item(items[4], local)["record"]]) == []
    summary = D.adaptive_summary(trials, [rd.load_trial(t) for t in trials if rd.load_trial(t)], AdaptivePolicy())
    (c,) = summary["cells"]
    assert (c["trials_used"], c["max_trials"], c["stopped"], summary["saved"]) == (3, 5, "converged", 2)
    whole = D.Decisions.from_run_dir(rd, suite).summary()["adaptive"]  # one rule, rebuilt from the run dir
    assert c in whole["cells"] and whole["trials_max"] == 10  # the plan's 2 cells of 5
    # off by default (the smoke suite has no adaptive field): trial 4 of a wide cell runs
    rd2, items2 = _planned(local)
    assert before_trial(items2[3], trials[3], suite, rd2, local) is None


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


def test_result_json_is_written_once_with_the_decisions_in_it(tmp_path):
    """The DAG's aggregate step: the decisions see the document before result.json exists, and the
    one result.json written holds ``run.node_health`` / ``run.adaptive``."""
    from dlperf_tasks.core.model import TrialMetric, TrialResult, TrialStatus
    from dlperf_tasks.core.settings import Settings
    from dlperf_tasks.engine import decisions, finish, setup
    from dlperf_tasks.engine.rundir import RunDir
    from dlperf_tasks.report.result_json import load_result

    cfg = Settings(work_dir=str(tmp_path / "work"), store_url=f"file://{tmp_path / 'store'}")
    out = setup.plan_runs("smoke", ["smoke"], {"topologies": ["1n1g"], "trials": 2, "adaptive": True}, cfg,
                          group_run_id="once")
    rd = RunDir(Path(out.runs[0].run_dir), out.runs[0].run_id)
    docs = [rd.save_trial(TrialResult(i.trial, TrialStatus.OK, "", TrialMetric(10.0 + k), nodes=["local0"],
                                      exit_codes={"local0": 0})) for k, i in enumerate(out.trials)]
    decided = decisions.RunDecisions(cfg)
    seen = []

    def decide(rd_, suite, result):
        seen.append(rd_.file("result.json").exists())
        decided(rd_, suite, result)

    finish.aggregate_runs(out, finish.collect_runs(out, docs), cfg, decide=decide)
    assert seen == [False]
    run = load_result(rd.file("result.json"))["run"]
    assert run["node_health"]["suspects"] == [] and run["adaptive"]["trials_used"] == 2
    assert [d["run_id"] for d in decided.done] == [rd.run_id]
