"""A/B confirmation (dlperf_tasks/engine/abconfirm.py): the plan reduced to the finding's cells,
the A/B environment taken from a sweep's result, and the DAG driver's pieces: the confirm trigger
confs from a seeded store with a planted regression, the A/B run set (interleaved, both images)
and the verdict recorded from A/B trial records."""

from __future__ import annotations

import pytest

from pathlib import Path

from dlperf_tasks.engine import abconfirm
from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.history import check, confirm as C
from dlperf_tasks.core.model import Trial
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.store import Store
from tests.fixtures import synth
from tests.unit.test_decisions_dag import _ok
from tests.unit.test_history_confirm import CELL, NEW_DIGEST
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.catalog.plan import plan


def test_plan_for_keeps_only_the_cells_one_trial_each():
    suite = load_suite("mxnet-bert")
    cells = [c.id for c in plan(suite).cells]
    multi = next(c for c in cells if c.endswith("/2n8g"))
    base = next(c for c in cells if c.endswith("/1n1g") and c.rsplit("/", 1)[0] == multi.rsplit("/", 1)[0])
    p = abconfirm.plan_for(suite, [multi, base])
    assert sorted(c.id for c in p.cells) == sorted([multi, base])
    assert sorted((t.trial.cell.id, t.trial.index) for t in p.trials) == sorted([(multi, 1), (base, 1)])
    with pytest.raises(DlperfError, match="has no cell"):
        abconfirm.plan_for(suite, ["mxnet-bert/bz999/fp32/1n1g"])


def test_env_of_a_sweep_result():
    res = {"run": {"image": "r/x:1", "image_digest": "r/x@sha256:ab", "env": {
        "driver": "535", "nccl": "2.18", "nccl_transport": {"t1": {"network": "IB"}, "t2": {"network": "IB"}},
        "gpus": [1, 2]}}}
    assert abconfirm.env_of(res) == {"image": "r/x:1", "image_digest": "r/x@sha256:ab", "driver": "535", "nccl": "2.18",
                               "transport": "IB"}


def test_redacted_registry_resolved_from_the_cluster():
    from dlperf_tasks.remote.inventory import Cluster

    c = Cluster.from_dict({"registry": {"server": "127.0.0.1:5000"}, "nodes": [{"name": "n1", "host": "127.0.0.1"}]})
    assert abconfirm.resolve_ref("<ip-1>:5000/nvidia/tf@sha256:ab", c) == "127.0.0.1:5000/nvidia/tf@sha256:ab"
    assert abconfirm.resolve_ref("nvcr.io/nvidia/tf:20.12", c) == "nvcr.io/nvidia/tf:20.12"
    bare = Cluster.from_dict({"nodes": [{"name": "n1", "host": "127.0.0.1"}]})
    with pytest.raises(DlperfError, match="--image-a"):
        abconfirm.resolve_ref("<host-2>/nvidia/tf@sha256:ab", bare)


def test_trigger_plan_and_verdict_from_a_seeded_store(tmp_path):
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, synth.nightly_results(9, plant={8: {CELL: 0.92}}, digest_changes={8: NEW_DIGEST},
                                                        trial_noise=0.005), str(tmp_path / "seed"))
    rep = check.check_run(store, ids[8], log=None, notify_target="")
    published = [{"run_id": ids[8], "suite": "mxnet-bert", "regressions": {"findings": len(rep.findings)}}]
    confs = abconfirm.trigger_confs({"runs": []}, published, store)
    (c,) = confs
    assert c["trigger_run_id"].startswith(f"confirm__{ids[8]}__") and c["conf"]["confirm"]["finding"] == f"throughput:{CELL}"
    assert abconfirm.trigger_confs({"confirm": {}}, published, store) == []  # a confirmation run triggers nothing
    from dlperf_tasks.airflow.params import validate_conf

    params = validate_conf(c["conf"], ["mxnet-bert"])
    settings = Settings.load(cluster="local", store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "w"))
    rs = abconfirm.plan_confirm("mxnet", ["mxnet-bert"], params, settings, group_run_id="manual__x")
    assert [(i["run_id"] == rs["runs"][0]["run_id"], i["trial"]["index"]) for i in rs["trials"]] == \
        [(True, 1), (False, 1), (True, 2), (False, 2), (True, 3), (False, 3), (True, 4), (False, 4)]
    assert [r["image"] for r in rs["runs"]] == [params["confirm"]["image_a"], params["confirm"]["image_b"]]
    assert abconfirm.plan_confirm("mxnet", ["mxnet-bert"], params, settings, "manual__x")["runs"] == rs["runs"]  # re-run
    for item in rs["trials"]:  # the A/B trials' records (B 8 % slower)
        rd = RunDir(Path(item["run_dir"]), item["run_id"])
        b = item["run_id"] == rs["runs"][1]["run_id"]
        rd.save_trial(_ok(Trial.from_dict(item["trial"]), (92.0 if b else 100.0) + item["trial"]["index"] * 0.1))
    doc = abconfirm.finish_confirm({k: v for k, v in rs.items() if k != "trials"}, store, notify_target="")
    assert doc["status"] == C.CONFIRMED and doc["effect_pct"] == pytest.approx(-8.0, abs=0.3)
    assert store.read_annotation(ids[8], C.ANNOTATION)["findings"][f"throughput:{CELL}"]["status"] == C.CONFIRMED
    assert abconfirm.trigger_confs({"runs": []}, published, store) == []  # confirmed: not planned again


def test_on_slurm_later_rounds_are_pinned_to_the_node_list_the_first_round_got(tmp_path):
    """run_ab through a Slurm cluster file: the trial records carry Slurm's node list (``node[3-4]``), which
    every later round gets as ``SweepOptions.nodes`` (engine/slurmsweep.py confines the jobs to it; tested on
    the real Slurm in tests/integration/test_slurm_runtime.py); a redacted registry is the cluster file's."""
    from types import SimpleNamespace

    from dlperf_tasks.core.model import TrialResult, TrialStatus, TrialMetric
    from dlperf_tasks.remote.slurm_inventory import SlurmCluster

    cluster = SlurmCluster.from_dict({"name": "site", "scheduler": "slurm", "login": {"host": "login1", "user": "u"},
                                      "registry": {"server": "127.0.0.1:5000"},
                                      "slurm": {"partition": "gpu", "work_dir": "/shared"}})
    suite = load_suite("pytorch-bert")
    cell = next(c.id for c in plan(suite).cells if c.id.endswith("/4n8g"))
    p = C.ConfirmPlan(suite=suite.id, run_id="flagged", finding=f"throughput:{cell}", kind="throughput", cell_id=cell,
                      cells=[cell], image_a="<ip-1>:5000/nvidia/pytorch@sha256:" + "a" * 64,
                      image_b="<ip-1>:5000/nvidia/pytorch@sha256:" + "b" * 64, run_a="good", rounds=2)
    calls = []

    def sweep(suite_, plan_, cluster_, out_dir, opts):
        calls.append((opts.image, opts.nodes))
        t = plan_.trials[0].trial
        r = TrialResult(trial=t, status=TrialStatus.OK, nodes=["node[3-4]"],
                        metric=TrialMetric(value=100.0 if "a" * 8 in opts.image else 90.0))
        return SimpleNamespace(ran=[r], all=[r], result={"run": {"image": opts.image}})

    values, env_a, env_b = abconfirm.run_ab(p, suite, cluster, tmp_path, sweep=sweep)
    assert calls[0] == ("127.0.0.1:5000/nvidia/pytorch@sha256:" + "a" * 64, None)
    assert [nodes for _, nodes in calls[1:]] == [["node[3-4]"]] * 3 and p.nodes == ["node[3-4]"]
    assert values == {"A": {cell: [100.0, 100.0]}, "B": {cell: [90.0, 90.0]}}
    assert env_b["image"].endswith("b" * 64)
