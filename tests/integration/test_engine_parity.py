"""One engine, two entry points: a DAG run (real Airflow, ``dag.test()``) and ``dlperf sweep`` of
the same suite on the simulated cluster (real sshd nodes, dockerd, registry; only the GPUs are
simulated by the stand-in trainer) produce result JSONs of the same schema with the same
sections, compared key by key: NCCL transport per multi-node trial, stragglers, env, image digest.
With adaptive trials and node health (quarantine) on, both take the same decisions through the one
``dlperf_tasks.engine.decisions.Decisions``: the same trials SKIPPED with the same reasons, the same
``adaptive.json`` / ``node-health.json`` (and ``run.adaptive`` / ``run.node_health``), compared
key by key except what must differ (run ids, times, paths, which node ran which trial).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dlperf_tasks.cli import main
from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog, state

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]

SPEEDS = {"1n1g": 101.5, "2n8g": 1500.5}
CONF = {"topologies": list(SPEEDS), "trials": 1, "precisions": ["fp32"], "batch_sizes": [32]}
# what each entry point was asked (form conf vs command-line flags): values, not sections; the
# decisions (adaptive trial counts, node health) are compared by the second test, with both on
ENTRY_SPECIFIC = {"params", "adaptive", "node_health"}


DATA_KEY = re.compile(r"^(node|local)\d+$|/")  # node names and trial ids are values used as keys


def shape(obj, path: str = "", skip: set[str] = ENTRY_SPECIFIC) -> dict[str, str]:
    """``{key path: JSON type}`` of every key of ``obj``; list items merged under ``[]``, keys that
    are data (node names, trial ids) merged under ``*``; an empty list is ``list0``."""
    kind = "null" if obj is None else type(obj).__name__
    out: dict[str, str] = {path or "$": "list0" if obj == [] else kind}
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = "*" if DATA_KEY.search(k) else k
            if k in skip:
                out[f"{path}.{key}"] = "entry-specific"
                continue
            out.update(shape(v, f"{path}.{key}", skip))
    elif isinstance(obj, list):
        for v in obj:
            out.update(shape(v, f"{path}[]", skip))
    return out


def differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Paths in one shape only (except below a list that is empty on the other side: no items, no
    keys; and the entry-specific keys), and paths whose types disagree."""
    def excused(p: str, other: dict[str, str]) -> bool:
        lists = [p[:i] for i in range(len(p)) if p.startswith("[]", i)]
        return any(other.get(q) == "list0" for q in lists) or p.rsplit(".", 1)[-1] in ENTRY_SPECIFIC

    out = [f"only in one: {p}" for p in sorted(set(a) ^ set(b)) if not excused(p, b if p in a else a)]
    out += [f"type {p}: {a[p]} vs {b[p]}" for p in sorted(set(a) & set(b)) if not _types_agree(a[p], b[p])]
    return out


def _types_agree(a: str, b: str) -> bool:
    return a == b or {a, b} <= {"int", "float"} or {a, b} <= {"list", "list0"} or "null" in (a, b)


def _dag_run_dir(sim, tmp_path: Path, monkeypatch, conf: dict) -> Path:
    """Run the pytorch DAG (site catalog with the stand-in's SPEEDS) with ``conf``: its published run dir."""
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS)))
    cfg = cluster_settings(sim.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work")
    dr = build_pytorch_dag(cfg).test(run_conf=conf)
    assert state(dr) == "success"
    (pub,) = json.loads((tmp_path / "work" / "last-pytorch.json").read_text())["published"]
    return Path(pub["run_dir"])


def test_dag_run_and_sweep_write_the_same_result_sections(airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    sim = sim_cluster_env
    dag_result = json.loads((_dag_run_dir(sim, tmp_path, monkeypatch, CONF) / "result.json").read_text())

    out = tmp_path / "sweep"
    rc = main(["sweep", "--suite", "pytorch-bert", "--cluster", str(sim.yaml_path), "--out", str(out),
               "--topologies", ",".join(SPEEDS), "--trials", "1", "--precisions", "fp32", "--batch-sizes", "32",
               "--quiet"])
    assert rc == 0
    sweep_result = json.loads((out / "result.json").read_text())

    (tmp_path / "dag-result.json").write_text(json.dumps(dag_result, indent=1))  # kept for a failing run
    assert differences(shape(dag_result), shape(sweep_result)) == []
    for res in (dag_result, sweep_result):
        run = res["run"]
        multi = [t["trial_id"] for c in res["cells"] if c["nodes"] > 1 for t in c["trials"]]
        assert multi and sorted(run["env"]["nccl_transport"]) == sorted(multi), run["env"]["nccl_transport"]
        assert all(v["network"] for v in run["env"]["nccl_transport"].values())
        assert sorted(t["trial_id"] for t in run["stragglers"]["trials"]) == sorted(multi)
        assert "@sha256:" in (run["image_digest"] or ""), run["image_digest"]
        assert run["env"] and {"nccl_transport"} < set(run["env"])
        assert {c["cell_id"]: c["median_speed"] for c in res["cells"]} == \
               {c["cell_id"]: c["median_speed"] for c in dag_result["cells"]}


# trials beyond each cell's minimum of 3 only while its median's CI is wider than 2 % (the stand-in's
# speeds are exact: every cell stops after 3); node health with quarantine on
DECIDED = {**CONF, "trials": 5, "adaptive": 0.02, "quarantine": True}
VARYING = {"run_id", "dag_run_id", "started_at", "finished_at", "source", "params", "location", "run_dir"}


def _records(run_dir: Path) -> dict[str, tuple[str, str]]:
    """``{trial_id: (status, reason of a SKIPPED trial)}`` of a run dir's trial records."""
    recs = [json.loads(p.read_text())["trial"] for p in (run_dir / "trials").glob("*.json")]
    return {t["trial_id"]: (t["status"], t["reason"] if t["status"] == "SKIPPED" else "") for t in recs}


def _placement_free(health: dict) -> dict:
    """node-health.json without what depends on which node ran which trial (the DAG's trial tasks
    lease nodes spread, the sweep's scheduler packs them)."""
    return {**health, "nodes": sorted((n["node"], n["suspect"], n["error_trials"], tuple(n["evidence"]))
                                      for n in health["nodes"])}


def test_dag_run_and_sweep_take_the_same_decisions(airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    sim = sim_cluster_env
    dag_dir = _dag_run_dir(sim, tmp_path, monkeypatch, DECIDED)

    # the sweep's own store and work dir: the DAG run's quarantine state is not the sweep's
    monkeypatch.setenv("DLPERF_STORE_URL", f"file://{tmp_path / 'sweep-store'}")
    monkeypatch.setenv("DLPERF_WORK_DIR", str(tmp_path / "sweep-work"))
    out = tmp_path / "sweep"
    rc = main(["sweep", "--suite", "pytorch-bert", "--cluster", str(sim.yaml_path), "--out", str(out),
               "--topologies", ",".join(SPEEDS), "--trials", "5", "--precisions", "fp32", "--batch-sizes", "32",
               "--adaptive", "0.02", "--quarantine", "--quiet"])
    assert rc == 0

    # the same trials ran, the same were SKIPPED, for the same reasons
    recs = _records(dag_dir)
    assert recs == _records(out)
    assert sorted(s for s, _ in recs.values()) == ["OK"] * 6 + ["SKIPPED"] * 4, recs
    docs = {}
    for name, where in (("dag", dag_dir), ("sweep", out)):
        result = json.loads((where / "result.json").read_text())
        ada, health = (json.loads((where / f).read_text()) for f in ("adaptive.json", "node-health.json"))
        assert result["run"]["adaptive"] == ada and result["run"]["node_health"] == health
        report = (where / "report.md").read_text()
        docs[name] = {"result": result, "adaptive": ada, "health": health,
                      "sections": report[report.index("## Adaptive trials"):]}
        assert "## Node health" in docs[name]["sections"]
    dag, sweep = docs["dag"], docs["sweep"]
    assert differences(shape(dag["result"], skip=VARYING), shape(sweep["result"], skip=VARYING)) == []
    assert dag["adaptive"] == sweep["adaptive"]  # every key: policy, per cell used/stopped/reason/median/CI
    assert (dag["adaptive"]["trials_used"], dag["adaptive"]["saved"]) == (6, 4), dag["adaptive"]
    assert _placement_free(dag["health"]) == _placement_free(sweep["health"])
    assert dag["health"]["suspects"] == [] and dag["health"]["quarantined"] == []
    assert sorted(n["node"] for n in dag["health"]["nodes"]) == sorted(n.name for n in sim.nodes)
    assert re.sub(r"node\d+", "N", dag["sections"]) == re.sub(r"node\d+", "N", sweep["sections"])
    for res in (dag["result"], sweep["result"]):  # SKIPPED trials are no invalid trials
        assert [(c["n_valid"], c["n_invalid"]) for c in res["cells"]] == [(3, 0), (3, 0)]
