"""Planted secrets never leak through Airflow: the real ``dlperf_pytorch`` DAG (``dag.test()`` in a
child process = the worker, the session's real Airflow metadata DB) runs on the private simulated
cluster (real sshd, dockerd, registry with auth; GPUs simulated by the stand-in) and publishes to a
real SeaweedFS S3. The registry password comes from the environment (the inventory's
``password_env``) and the S3 secret key from ``DLPERF_S3_SECRET_ACCESS_KEY``; a third marker is
planted in an environment variable the tasks can see but must never print.

Searched afterwards for every secret: the task logs (the worker's output, and every file under
AIRFLOW_HOME), the whole Airflow metadata DB (XCom values, rendered template fields, DAG run
conf, task instance rows... as one SQL dump), the run directory (trial files, logs, result.json,
report.md, env.json, plan.json), and every object published to the bucket."""

from __future__ import annotations

import os
import secrets
import sqlite3
from pathlib import Path

import pytest

from tests.faults._fault_helpers import dag_child, dag_run_outcome, fault_sim, run_dirs, start_dag_run  # noqa: F401
from tests.integration.dag_cluster_helpers import site_catalog

pytestmark = [pytest.mark.cluster, pytest.mark.s3, pytest.mark.airflow, pytest.mark.slow]


def _db_dump(airflow_home: Path) -> str:
    con = sqlite3.connect(str(airflow_home / "airflow.db"))
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


def _tree_text(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and not any(part in skip for part in p.parts):
            try:
                out[str(p)] = p.read_bytes().decode(errors="replace")
            except OSError:
                continue
    return out


def test_dag_run_leaks_no_secret(airflow_db, fault_sim, s3_live, tmp_path, monkeypatch):
    sim, s3 = fault_sim, s3_live
    marker = "PLANTED-" + secrets.token_hex(8)
    monkeypatch.setenv("DLPERF_FAULT_PLANTED_SECRET", marker)
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    planted = {"registry password": sim.env["DLPERF_REGISTRY_PASSWORD"], "s3 secret key": s3.secret_key,
               "planted env marker": marker}
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert",
                                                                {"1n1g": 100.0, "2n8g": 1500.0})))
    bucket = s3.new_bucket("afsec")
    work = tmp_path / "work"
    script = dag_child(tmp_path, sim, work, "secrets", s3.store_url(bucket, "dlperf"))
    import datetime as dt

    when = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    proc = start_dag_run(script, when, {"topologies": ["1n1g", "2n8g"], "trials": 1, "precisions": ["fp32"],
                                        "batch_sizes": [32]}, tmp_path / "worker.log")
    proc.wait(400)
    dr = dag_run_outcome(tmp_path / "worker.log")
    assert dr["state"] == "success", dr["tasks"]
    (run_dir,) = run_dirs(work)
    assert (run_dir / "result.json").is_file()

    cli = s3.client()
    objects = {}
    for page in cli.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            objects[o["Key"]] = cli.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().decode(errors="replace")
    assert any(k.endswith("manifest.json") for k in objects), sorted(objects)

    home = Path(os.environ["AIRFLOW_HOME"])
    dump = _db_dump(home)
    assert dr["run_id"] in dump and 'INSERT INTO "xcom"' in dump  # the DB holds this run and its XComs
    texts = {"worker output (task logs)": (tmp_path / "worker.log").read_text(errors="replace"),
             "airflow metadata DB (xcom, rendered fields, conf...)": dump}
    texts.update({f"AIRFLOW_HOME {k}": v for k, v in _tree_text(home, skip=("airflow.db",)).items()
                  if not k.endswith(("airflow.db", "airflow.db-journal", "airflow.db-wal"))})
    texts.update({f"run dir {k}": v for k, v in _tree_text(run_dir).items()})
    texts.update({f"bucket {k}": v for k, v in objects.items()})
    assert "published " in texts["worker output (task logs)"]  # the task logs are really in there
    for what, secret in planted.items():
        leaks = [where for where, text in texts.items() if secret in text]
        assert leaks == [], f"{what} found in {leaks[:5]}"
