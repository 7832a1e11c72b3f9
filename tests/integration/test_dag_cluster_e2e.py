"""The ``dlperf_pytorch`` DAG through real Airflow (``dag.test()``, SQLite
metadata DB) on the simulated 4-node cluster (real sshd nodes, real dockerd, real registry with
auth; docs/testcluster.md), publishing to a real SeaweedFS S3 server.

Only the GPUs are simulated: the cluster's registry serves the stand-in trainer under the suite's
NGC name (127.0.0.1:5000/nvidia/pytorch:20.06-py3 for nvcr.io/nvidia/pytorch:20.06-py3; the
inventory's ``images:`` list maps one to the other), and the stand-in prints PyTorch BERT's real
log format at the speeds a site catalog override sets. Registry credentials come from the
cluster's env file exported as environment variables (``password_env``), S3 credentials from
``DLPERF_S3_*``: nothing secret is in code.

Checked with plain boto3 afterwards: every object of the manifest (sizes, sha256), the result
numbers equal the configured speeds (DLPerf rounding), plots published, no object contains a
node address (127.0.10.x), node name, the registry user or password; the nodes are idle.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import time

import pytest

from tests.integration.dag_cluster_helpers import (
    assert_cluster_idle, build_pytorch_dag, cluster_settings, site_catalog, state, task_states)

pytestmark = [pytest.mark.cluster, pytest.mark.s3, pytest.mark.airflow, pytest.mark.slow]

SPEEDS = {"1n1g": 101.5, "1n8g": 790.25, "2n8g": 1500.5, "4n8g": 2900.75}


def _objects(client, bucket: str, prefix: str) -> dict[str, bytes]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def test_pytorch_dag_on_cluster_publishes_exact_results_to_s3(airflow_db, sim_cluster_env, s3_server, tmp_path,
                                                                monkeypatch):
    sim = sim_cluster_env
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(site_catalog(tmp_path / "catalog", "pytorch-bert", SPEEDS)))
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    bucket = s3_server.new_bucket("e2e")
    cfg = cluster_settings(sim.yaml_path, s3_server.store_url(bucket, "dlperf"), tmp_path / "work")
    dag = build_pytorch_dag(cfg)

    t0 = time.monotonic()
    dr = dag.test(run_conf={"topologies": list(SPEEDS), "trials": 2, "precisions": ["fp32"], "batch_sizes": [32]})
    elapsed = time.monotonic() - t0
    states = task_states(dr)
    assert state(dr) == "success", states
    assert sorted(s for (t, _), s in states.items() if t == "trial") == ["success"] * 8
    assert states[("cleanup", -1)] == "success"
    print(f"dlperf_pytorch on the simulated cluster: {elapsed:.1f} s for 8 trials")

    last = json.loads((tmp_path / "work" / "last-pytorch.json").read_text())
    (pub,) = last["published"]
    run_id = pub["run_id"]
    assert pub["location"].startswith(f"s3://{bucket}/dlperf/runs/pytorch-bert/")
    assert "regressions" in pub and "error" not in pub["regressions"], pub["regressions"]

    # ---- everything back with plain boto3 ----------------------------------------------
    client = s3_server.client()
    run_prefix = pub["location"].removeprefix(f"s3://{bucket}/") + "/"
    objs = _objects(client, bucket, run_prefix)
    manifest = json.loads(objs[run_prefix + "manifest.json"])
    assert manifest["run_id"] == run_id and manifest["suite"] == "pytorch-bert"
    listed = {o["path"]: o for o in manifest["objects"]}
    for path, o in listed.items():
        data = objs[run_prefix + path]
        assert len(data) == o["size"] and hashlib.sha256(data).hexdigest() == o["sha256"], path
    assert "result.json" in listed and "report.md" in listed and "logs.tar.gz" in listed
    plots = [p for p in listed if p.startswith("plots/") and p.endswith(".png")]
    assert plots, f"no plots published: {sorted(listed)}"
    assert sum(1 for p in listed if p.startswith("logs/") and p.endswith(".log")) >= 8

    # the regression check ran after publish (first run of the suite here: nothing to compare) and
    # recorded its report next to the run
    assert pub["regressions"]["findings"] == 0 and pub["regressions"]["summary"], pub["regressions"]
    regress = json.loads(objs[run_prefix + "annotations/regressions.json"])
    assert "run_id" in json.dumps(regress) and run_id in json.dumps(regress)

    result = json.loads(objs[run_prefix + "result.json"])
    assert result["run"]["dag_run_id"] == dr.run_id
    # the mirror's registry address is an IP: redacted in the store, exact in the local run dir
    assert result["run"]["image"].endswith("/nvidia/pytorch:20.06-py3") and "127.0.0.1" not in result["run"]["image"]
    local = json.loads((tmp_path / "work" / run_id / "result.json").read_text())
    assert local["run"]["image"] == sim.image("pytorch:20.06-py3")
    assert (local["run"]["image_digest"] or "").startswith(sim.image("pytorch:20.06-py3").rsplit(":", 1)[0] + "@sha256:")
    cells = {c["topology"]: c for c in result["cells"]}
    assert {t: cells[t]["median_speed"] for t in SPEEDS} == SPEEDS
    for topo, c in cells.items():
        assert c["n_valid"] == 2 and c["n_invalid"] == 0, c["trials"]
        assert [t["value"] for t in c["trials"]] == [SPEEDS[topo]] * 2
        assert c["speedup"] == round(SPEEDS[topo] / SPEEDS["1n1g"], 2)
        assert len(c["trials"][0]["node_names"]) == int(topo[0])
    assert result["dlperf"]["bz32"]["bert-base"]["4n8g"]["median_speed"] == SPEEDS["4n8g"]

    # ---- nothing identifying the cluster in any published object ------------------------
    forbidden = [n.host for n in sim.nodes] + [n.name for n in sim.nodes] + \
        [sim.env["DLPERF_REGISTRY_USER"], sim.env["DLPERF_REGISTRY_PASSWORD"]]
    addr = re.compile(rb"127\.0\.10\.\d+")
    for key, data in objs.items():
        if key.endswith((".png", ".tar.gz")):
            continue
        assert not addr.search(data), key
        text = data.decode(errors="replace")
        for word in forbidden:
            assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text), (key, word)
    # the archive's members too
    with tarfile.open(fileobj=io.BytesIO(objs[run_prefix + "logs.tar.gz"])) as tar:
        for m in tar.getmembers():
            if m.isfile():
                data = tar.extractfile(m).read()
                assert not addr.search(data) and b"node1" not in data, m.name

    index = json.loads(client.get_object(Bucket=bucket, Key="dlperf/index/pytorch-bert.json")["Body"].read())
    assert [r["run_id"] for r in index["runs"]] == [run_id]

    print("containers labelled dlperf.run now:", [(c["ID"][:12], c["Labels"]) for c in sim.containers("dlperf.run")])
    assert_cluster_idle(sim, run_id, [t["trial_key"] for c in local["cells"] for t in c["trials"]])
