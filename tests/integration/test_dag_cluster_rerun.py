"""Re-running a DAG run of ``dlperf_pytorch`` on the simulated cluster (real sshd nodes, dockerd,
registry; only GPUs simulated by the stand-in trainer) runs only its missing or invalid trials.

``dag.test()`` twice with the same logical date and run_after gives the same ``dag_run_id`` the
second time (what clearing a DAG run in the UI does: the run id stays, every task runs again).
Between the two, one trial's result file is deleted (missing) and another is marked invalid.
Checked: the same run id and run directory are used, exactly those two trials run again (the
others keep their result file untouched), every trial is counted once in ``result.json``, and
publishing again leaves one index row for the run.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.dag_cluster_helpers import (
    assert_cluster_idle, build_pytorch_dag, cluster_settings, fixed_logical_date, site_catalog, state, task_states)

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]

SPEEDS = {"1n1g": 101.5, "1n8g": 790.25}
CONF = {"topologies": list(SPEEDS), "trials": 2, "precisions": ["fp32"], "batch_sizes": [32]}


def test_rerun_runs_only_missing_or_invalid_trials(airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    sim = sim_cluster_env
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS)))
    work, store = tmp_path / "work", tmp_path / "store"
    cfg = cluster_settings(sim.yaml_path, f"file://{store}", work)
    dag = build_pytorch_dag(cfg)
    when = fixed_logical_date()

    t0 = time.monotonic()
    dr1 = dag.test(logical_date=when, run_after=when, run_conf=CONF)
    first_s = time.monotonic() - t0
    assert state(dr1) == "success", task_states(dr1)
    (run_dir,) = [p for p in work.glob("pytorch-bert-*") if p.is_dir()]
    files = {p.stem: p for p in (run_dir / "trials").glob("*.json")}
    assert len(files) == 4
    docs = {k: json.loads(p.read_text()) for k, p in files.items()}  # the one trial record format
    assert all(d["trial"]["status"] == "OK" for d in docs.values())

    by_id = {d["cell"]["topology"] + f"/t{d['trial']['index']}": k for k, d in docs.items()}
    missing, invalid = by_id["1n1g/t1"], by_id["1n8g/t2"]
    kept = sorted(set(files) - {missing, invalid})
    kept_stat = {k: (files[k].stat().st_mtime_ns, docs[k]["trial"]["started_at"]) for k in kept}
    # tasks hand trial records over through the store's staging area: change both copies
    def staged(key):
        (p,) = store.rglob(f"staging/{run_dir.name}/trials/{key}.json")
        return p

    for p in (files[missing], staged(missing)):
        p.unlink()
    bad = dict(docs[invalid], trial=dict(docs[invalid]["trial"], status="INVALID_LOG", valid=False,
                                         reason="marked invalid by the test"))
    for p in (files[invalid], staged(invalid)):
        p.write_text(json.dumps(bad))

    t0 = time.monotonic()
    dr2 = dag.test(logical_date=when, run_after=when, run_conf=CONF)
    second_s = time.monotonic() - t0
    print(f"first run {first_s:.1f} s (4 trials), re-run {second_s:.1f} s (2 trials)")
    assert dr2.run_id == dr1.run_id
    assert state(dr2) == "success", task_states(dr2)
    assert [p for p in work.glob("pytorch-bert-*") if p.is_dir()] == [run_dir], "the re-run must reuse the run dir"

    now = {p.stem: json.loads(p.read_text()) for p in (run_dir / "trials").glob("*.json")}
    assert set(now) == set(files)
    assert all(d["trial"]["status"] == "OK" for d in now.values())
    for k in kept:  # reused: not run again, file untouched
        assert (files[k].stat().st_mtime_ns, now[k]["trial"]["started_at"]) == kept_stat[k], k
    for k in (missing, invalid):  # run again
        assert now[k]["trial"]["started_at"] != docs[k]["trial"]["started_at"], k

    result = json.loads((run_dir / "result.json").read_text())
    assert result["run"]["run_id"] == run_dir.name and result["run"]["dag_run_id"] == dr1.run_id
    for c in result["cells"]:
        assert [t["index"] for t in c["trials"]] == [1, 2], c["cell_id"]
        assert c["n_valid"] == 2 and c["n_invalid"] == 0
        assert c["median_speed"] == SPEEDS[c["topology"]]
    index = json.loads(next(store.rglob("index/pytorch-bert.json")).read_text())
    assert [r["run_id"] for r in index["runs"]] == [run_dir.name]
    assert_cluster_idle(sim, run_dir.name, list(files))
