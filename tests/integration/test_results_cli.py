"""``dlperf results`` end to end against a REAL store: a local directory store and the REAL
SeaweedFS S3 server (tests/fixtures/s3.py), seeded through the real publish path with 31
synthetic nightly runs (per-trial noise 1.5 %, per-night 0.5 %) whose last run carries a
planted 6 % throughput drop on bz24/fp32/1n1g and a planted 6 % speedup drop on bz32/fp32/4n8g
(1n1g unchanged). The CLI runs as a subprocess (``python -m dlperf_tasks results ...``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures import synth
from dlperf_tasks.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
T_CELL = "mxnet-bert/bz24/fp32/1n1g"
S_CELL = "mxnet-bert/bz32/fp32/4n8g"
N = 31


class Seeded:
    def __init__(self, kind, store, env, results, s3=None, bucket=None):
        self.kind, self.store, self.env, self.results, self.s3, self.bucket = kind, store, env, results, s3, bucket
        self.ids = [r["run"]["run_id"] for r in results]

    def cli(self, *args, check=True):
        env = dict(os.environ, **self.env)
        env.pop("DLPERF_NOTIFY_URL", None)
        p = subprocess.run([sys.executable, "-m", "dlperf_tasks", "results", *args], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            raise AssertionError(f"dlperf results {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def corrupt(self, run_id, rel):
        key = self.store.run_key(run_id, rel)
        if self.kind == "local":
            path = Path(self.store.backend.root) / key
            path.write_bytes(path.read_bytes().replace(b"mxnet", b"MXNET", 1))
        else:
            c = self.s3.client()
            body = c.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            c.put_object(Bucket=self.bucket, Key=key, Body=body.replace(b"mxnet", b"MXNET", 1),
                         Metadata={"sha256": "0" * 64})


@pytest.fixture(scope="module", params=["local", "s3"])
def seeded(request, tmp_path_factory):
    results = synth.nightly_results(N, plant={N - 1: {T_CELL: 0.94, S_CELL: 0.94}},
                                    env_changes={N - 1: {"nccl": "2.19.3"}})
    work = tmp_path_factory.mktemp(f"seed-{request.param}")
    if request.param == "local":
        url = f"file://{work / 'store'}"
        store = Store.from_url(url)
        env = {"DLPERF_STORE_URL": url}
        s3 = bucket = None
    else:
        s3 = request.getfixturevalue("s3_server")
        bucket = s3.new_bucket("hist")
        url = s3.store_url(bucket)
        env = {"DLPERF_STORE_URL": url, **s3.env()}
        old = {k: os.environ.get(k) for k in s3.env()}
        os.environ.update(s3.env())
        store = Store.from_url(url)
        request.addfinalizer(lambda: [os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
                                      for k, v in old.items()])
    synth.seed_store(store, results, str(work / "runs"), plots_for_last=2, report=True)
    return Seeded(request.param, store, env, results, s3, bucket)


def test_ls_filters_and_formats(seeded):
    rows = json.loads(seeded.cli("ls", "--suite", "mxnet-bert", "--limit", "100", "--format", "json").stdout)
    assert [r["run_id"] for r in rows] == list(reversed(seeded.ids))
    assert all(r["status"] == "ok" and r["cells"] == 8 and r["valid_trials"] == 56 for r in rows)
    since = json.loads(seeded.cli("ls", "--since", "2026-01-25", "--format", "json").stdout)
    assert [r["date"] for r in since][-1] == "2026-01-25" and len(since) == 7
    assert json.loads(seeded.cli("ls", "--status", "failed", "--format", "json").stdout) == []
    assert len(json.loads(seeded.cli("ls", "--framework", "mxnet_bert", "--model", "bert-base",
                                     "--format", "json", "--limit", "3").stdout)) == 3
    assert json.loads(seeded.cli("ls", "--model", "resnet50", "--format", "json").stdout) == []
    table = seeded.cli("ls", "--limit", "2").stdout.splitlines()
    assert table[0].split()[:4] == ["run_id", "suite", "date", "status"] and seeded.ids[-1] in table[2]
    csv = seeded.cli("ls", "--limit", "2", "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("run_id,suite,date,status") and len(csv) == 3


def test_show(seeded):
    rid = seeded.ids[-1]
    out = seeded.cli("show", rid).stdout
    assert rid in out and "nccl=2.19.3" in out
    for cell in synth.cell_ids():
        assert cell in out
    doc = json.loads(seeded.cli("show", rid, "--format", "json").stdout)
    med = {c["cell_id"]: c["median"] for c in doc["cells"]}
    assert med == {c["cell_id"]: c["median_speed"] for c in seeded.results[-1]["cells"]}
    bad = seeded.cli("show", "no-such-run", check=False)
    assert bad.returncode == 2 and "dlperf: error:" in bad.stderr and "no-such-run" in bad.stderr


def test_get_verifies_and_refuses_corruption(seeded, tmp_path):
    rid = seeded.ids[-1]
    seeded.cli("get", rid, "--to", str(tmp_path / "ok"))
    manifest = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    names = {e["path"] for e in manifest["objects"]}
    assert {"result.json", "report.md", "plots/bert-base_fp32_speedup.png"} <= names
    assert json.loads((tmp_path / "ok" / "result.json").read_text())["run"]["run_id"] == rid
    # corrupt one archived object in the store itself
    victim = seeded.ids[-3]
    seeded.corrupt(victim, "report.md")
    p = seeded.cli("get", victim, "--to", str(tmp_path / "bad"), check=False)
    assert p.returncode == 2
    assert "checksum mismatch" in p.stderr and "report.md" in p.stderr
    assert not (tmp_path / "bad" / "report.md").exists()


def test_compare_shows_planted_cells(seeded):
    a, b = seeded.ids[-2], seeded.ids[-1]
    doc = json.loads(seeded.cli("compare", a, b, "--format", "json").stdout)
    by = {c["cell_id"]: c for c in doc["cells"]}
    for cell in (T_CELL, S_CELL):
        assert by[cell]["verdict"] == "slower" and by[cell]["beyond_noise"] is True
        assert -10 < by[cell]["delta_pct"] < -3
    assert sum(c["beyond_noise"] for c in doc["cells"]) == 2
    assert doc["env_diff"]["nccl"] == {"baseline": "2.18.5", "current": "2.19.3"}
    assert all(c["noise_source"].startswith("history") for c in doc["cells"])
    assert by[S_CELL]["ci_pct"][1] < 0 and by[S_CELL]["mde_pct"] > 0
    out = seeded.cli("compare", a, b).stdout
    assert "slower" in out and "environment diff: nccl: 2.18.5 -> 2.19.3" in out and "verdicts:" in out
    # short forms: a unique prefix and "latest"
    same = json.loads(seeded.cli("compare", a, "latest", "--format", "json").stdout)
    assert same["run_b"] == b and same["run_a"] == a


def test_show_latest_and_prefix(seeded):
    rid = seeded.ids[-1]
    assert json.loads(seeded.cli("show", "latest", "--format", "json").stdout)["run"]["run_id"] == rid
    assert json.loads(seeded.cli("show", rid[:-1], "--suite", "mxnet-bert", "--format", "json").stdout)["run"]["run_id"] == rid
    amb = seeded.cli("show", rid[:4], check=False)
    assert amb.returncode == 2 and "ambiguous" in amb.stderr


def test_trend_table_json_and_png(seeded, tmp_path):
    png = tmp_path / "trend.png"
    out = seeded.cli("trend", "--suite", "mxnet-bert", "--cell", "4n8g/bz32/fp32", "--last", "10",
                     "--png", str(png)).stdout
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["date", "run_id", "status"]
    assert len(lines) == 2 + 10 + 1 and f"cell {S_CELL}: 10 run(s)" in lines[-1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    doc = json.loads(seeded.cli("trend", "--suite", "mxnet-bert", "--cell", "bz32/fp32/4n8g",
                                "--format", "json").stdout)
    pts = doc["points"]
    assert len(pts) == N and pts[-1]["run_id"] == seeded.ids[-1]
    hist = sorted(p["median"] for p in pts[:-1])
    assert pts[-1]["median"] < 0.96 * hist[len(hist) // 2]
    bad = seeded.cli("trend", "--suite", "mxnet-bert", "--cell", "4n8g", check=False)
    assert bad.returncode == 2 and "ambiguous" in bad.stderr


def test_check_records_findings(seeded):
    rid = seeded.ids[-1]
    p = seeded.cli("check", rid, "--record", "--format", "json", check=False)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert {(f["kind"], f["cell_id"]) for f in doc["findings"]} == {("throughput", T_CELL), ("scaling", S_CELL)}
    assert json.loads(seeded.cli("show", rid, "--format", "json").stdout)["regressions"]["findings"]
    # stored as the run's annotation; the manifest (object list + checksums) stays as published
    assert seeded.store.read_annotation(rid, "regressions")["run_id"] == rid
    assert "regressions" not in seeded.store.read_manifest(rid)
    rows = json.loads(seeded.cli("ls", "--limit", "2", "--format", "json").stdout)
    assert rows[0]["findings"] == 2 and rows[1]["findings"] is None
    # the annotation leaves the objects verifiable
    assert seeded.store.read_result(rid)["run"]["run_id"] == rid
    # an older clean run: no findings, exit 0
    assert seeded.cli("check", seeded.ids[-2]).returncode == 0


def test_export_parquet(seeded, tmp_path):
    out = tmp_path / "h.parquet"
    seeded.cli("export", "--suite", "mxnet-bert", "--parquet", str(out))
    df = pd.read_parquet(out)
    assert len(df) == N * 8
    assert set(df.cell_id) == set(synth.cell_ids())
    last = df[(df.run_id == seeded.ids[-1]) & (df.cell_id == S_CELL)].iloc[0]
    assert last["env.nccl"] == "2.19.3" and len(last["trial_values"]) == 7
