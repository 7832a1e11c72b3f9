"""Registry credentials from an Airflow connection instead of the environment: the
``dlperf_pytorch`` DAG (``dag.test()``) on the simulated cluster (real sshd nodes, dockerd and
registry with htpasswd auth; GPUs simulated by the stand-in trainer) with an inventory that has
no ``env_file`` and no registry variables in the environment. The password is only in the
connection ``dlperf_registry`` (a connections file, as a secrets backend would hold it), so the
``docker login`` of prepare - which the registry refuses without the right password - and the
trial only succeed through it. The password never appears in the run's files."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.integration.dag_cluster_helpers import build_pytorch_dag, cluster_settings, site_catalog, state, task_states

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.slow]


def test_registry_password_from_airflow_connection(airflow_db, sim_cluster, tmp_path, monkeypatch):
    sim = sim_cluster
    password, user = sim.env["DLPERF_REGISTRY_PASSWORD"], sim.env["DLPERF_REGISTRY_USER"]
    for k in sim.env:
        monkeypatch.delenv(k, raising=False)
    inv = yaml.safe_load(sim.yaml_path.read_text())
    inv.pop("env_file", None)
    inv["registry"]["username"] = "not-the-user"  # the connection's login wins
    inv_path = tmp_path / "cluster.yaml"
    inv_path.write_text(yaml.safe_dump(inv))
    conns = tmp_path / "connections.json"
    conns.write_text(json.dumps({"dlperf_registry": {"conn_type": "generic", "login": user, "password": password}}))
    os.chmod(conns, 0o600)
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", {"1n1g": 99.5})))
    work = tmp_path / "work"
    dag = build_pytorch_dag(cluster_settings(inv_path, f"file://{tmp_path / 'store'}", work))

    dr = dag.test(run_conf={"topologies": ["1n1g"], "trials": 1, "precisions": ["fp32"], "batch_sizes": [32]},
                  conn_file_path=str(conns))
    assert state(dr) == "success", task_states(dr)
    (run_dir,) = [p for p in work.glob("pytorch-bert-*") if p.is_dir()]
    result = json.loads((run_dir / "result.json").read_text())
    assert [c["median_speed"] for c in result["cells"]] == [99.5]
    for p in work.rglob("*"):
        if p.is_file():
            assert password.encode() not in p.read_bytes(), p
