"""The run set, its runs and trial items (engine/runset.py): what planning makes round-trips
through its XCom dict form unchanged, and a malformed dict fails with one line naming the field."""

from __future__ import annotations

import json

import pytest

from dlperf_tasks.core.settings import Settings
from dlperf_tasks.engine import setup
from dlperf_tasks.engine.runset import RunEntry, RunSet, RunSetError, TrialItem

PARAMS = {"topologies": ["1n1g"], "trials": 2, "warmup_iters": 1, "measure_iters": 2}


@pytest.fixture()
def planned(tmp_path) -> RunSet:
    cfg = Settings(work_dir=str(tmp_path / "work"), store_url=f"file://{tmp_path / 'store'}")
    return setup.plan_runs("smoke", ["smoke"], PARAMS, cfg, group_run_id="manual__2026-01-01")


def test_a_planned_run_set_round_trips_through_json(planned):
    doc = json.loads(json.dumps(planned.to_dict()))  # what XCom stores
    assert RunSet.from_dict(doc) == planned
    assert RunSet.from_dict(doc).to_dict() == doc
    (run,) = doc["runs"]
    assert set(run) == {"run_id", "run_dir", "suite", "framework", "image", "upstream_commit", "started_at",
                        "window", "n_trials", "summary", "rerun"}
    item = doc["trials"][0]
    assert item["trial_id"] == planned.trials[0].trial.id and item["key"] == planned.trials[0].trial.key
    assert item["planned"] == 2 and item["planned_runs"] == [run["run_id"]]
    assert doc["trial_keys"] == [i["key"] for i in doc["trials"]]


def test_the_plan_xcom_leaves_the_items_out_and_keeps_the_trial_keys(planned):
    doc = planned.to_dict(trials=False)
    assert "trials" not in doc and len(doc["trial_keys"]) == 2
    back = RunSet.from_dict(doc)
    assert back.trials == () and back.trial_keys == planned.trial_keys and back.runs == planned.runs


def test_an_ab_run_set_keeps_its_confirm_plan_and_variants():
    doc = {"runs": [{"run_id": "a", "run_dir": "/w/a", "suite": "smoke", "variant": "A"},
                    {"run_id": "b", "run_dir": "/w/b", "suite": "smoke", "variant": "B"}],
           "trial_keys": [], "dry_run": False, "policy": "continue", "cluster": "local", "params": {},
           "confirm": {"finding": "throughput:x", "runs": {"A": "a", "B": "b"}}}
    rs = RunSet.from_dict(doc)
    assert [r.variant for r in rs.runs] == ["A", "B"] and rs.confirm["runs"] == {"A": "a", "B": "b"}
    assert RunSet.from_dict(rs.to_dict(trials=False)) == rs
    assert rs.to_dict(trials=False)["confirm"] == doc["confirm"]
    assert "variant" not in RunEntry(run_id="c", run_dir="/w/c", suite="smoke").to_dict()


def test_rebased_moves_every_run_dir_to_this_worker(planned, tmp_path):
    here = planned.rebased(tmp_path / "other")
    assert [r.run_dir for r in here.runs] == [str(tmp_path / "other" / r.run_id) for r in planned.runs]
    assert {i.run_dir for i in here.trials} == {str(tmp_path / "other" / planned.runs[0].run_id)}
    assert here.trials[0].trial == planned.trials[0].trial


def test_of_takes_the_object_or_its_dict(planned):
    assert RunSet.of(planned) is planned
    assert RunSet.of(planned.to_dict()) == planned
    item = planned.trials[0]
    assert TrialItem.of(item) is item and TrialItem.of(item.to_dict()) == item


@pytest.mark.parametrize("mangle, message", [
    (lambda d: d.pop("runs"), "run set.runs: missing"),
    (lambda d: d.update(runs={"x": 1}), "run set.runs: expected list, got dict"),
    (lambda d: d["runs"][0].pop("run_dir"), "run set.runs[0].run_dir: missing"),
    (lambda d: d["runs"][0].update(n_trials="2"), "run set.runs[0].n_trials: expected int, got str '2'"),
    (lambda d: d["runs"][0].update(rerun="yes"), "run set.runs[0].rerun: expected bool, got str 'yes'"),
    (lambda d: d["trials"][1].update(trial={"index": 1}), "run set.trials[1].trial: not a planned trial (KeyError: 'cell')"),
    (lambda d: d["trials"][0].update(planned=True), "run set.trials[0].planned: expected int, got bool True"),
    (lambda d: d["trials"][0].update(planned_runs=["r", 3]), "run set.trials[0].planned_runs[1]: expected str, got int"),
    (lambda d: d.update(dry_run="false"), "run set.dry_run: expected bool, got str 'false'"),
    (lambda d: d["runs"][0].update(suite="x" * 100), None),
    (lambda d: d.update(params=[]), "run set.params: expected Mapping, got list"),
    (lambda d: d["trials"].append("x"), "run set.trials[2]: expected a mapping, got str"),
])
def test_malformed_input_is_one_line_naming_the_field(planned, mangle, message):
    doc = json.loads(json.dumps(planned.to_dict()))
    mangle(doc)
    if message is None:  # a long value is fine where a string is wanted
        assert RunSet.from_dict(doc).runs[0].suite == "x" * 100
        return
    with pytest.raises(RunSetError) as err:
        RunSet.from_dict(doc)
    assert str(err.value) == message and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)  # the trial operator fails such a task without retries


def test_a_bare_item_dict_names_its_field():
    with pytest.raises(RunSetError, match=r"^item\.suite: missing$"):
        TrialItem.from_dict({"run_id": "r", "run_dir": "/w/r", "trial": {}})
    with pytest.raises(RunSetError, match=r"^run set: expected a mapping, got NoneType$"):
        RunSet.from_dict(None)
