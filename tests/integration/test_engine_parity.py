"""One engine, two entry points: a DAG run (real Airflow, ``dag.test()``) and ``dlperf sweep`` of
the same suite on the simulated cluster (real sshd nodes, dockerd, registry; only the GPUs are
simulated by the stand-in trainer) produce result JSONs of the same schema with the same
sections, compared key by key: NCCL transport per multi-node trial, stragglers, env, image digest.
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
# what each entry point was asked (form conf vs command-line flags): values, not sections; and the
# sweep-only decisions of dlperf_tasks.engine.decisions (adaptive trial counts, node quarantine), which need the
# sweep's own scheduling loop
ENTRY_SPECIFIC = {"params", "adaptive", "node_health"}


DATA_KEY = re.compile(r"^(node|local)\d+$|/")  # node names and trial ids are values used as keys


def shape(obj, path: str = "") -> dict[str, str]:
    """``{key path: JSON type}`` of every key of ``obj``; list items merged under ``[]``, keys that
    are data (node names, trial ids) merged under ``*``; an empty list is ``list0``."""
    kind = "null" if obj is None else type(obj).__name__
    out: dict[str, str] = {path or "$": "list0" if obj == [] else kind}
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = "*" if DATA_KEY.search(k) else k
            if k in ENTRY_SPECIFIC:
                out[f"{path}.{key}"] = "entry-specific"
                continue
            out.update(shape(v, f"{path}.{key}"))
    elif isinstance(obj, list):
        for v in obj:
            out.update(shape(v, f"{path}[]"))
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


def test_dag_run_and_sweep_write_the_same_result_sections(airflow_db, sim_cluster_env, tmp_path, monkeypatch):
    sim = sim_cluster_env
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS)))
    cfg = cluster_settings(sim.yaml_path, f"file://{tmp_path / 'store'}", tmp_path / "work")
    dr = build_pytorch_dag(cfg).test(run_conf=CONF)
    assert state(dr) == "success"
    (pub,) = json.loads((tmp_path / "work" / "last-pytorch.json").read_text())["published"]
    dag_result = json.loads((Path(pub["run_dir"]) / "result.json").read_text())

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
