"""`dlperf sweep` end to end on real sshd nodes with the host runtime (no container) and the
stand-in trainer replaying PyTorch BERT logs at configured speeds (GPUs are not needed: the
stand-in fakes torch.distributed.launch). Checks the exact speeds, node assignment, the
re-run that fills only missing trials, and two concurrent sweeps never sharing a node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.cli import main
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.runtime import HostRuntime
from dlperf_tasks.remote.ssh import SSHPool
from tests.fixtures.sshd_nodes import make_nodes, stop_nodes

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "docker" / "standin" / "rootfs"
SPEEDS = {"1n1g": 101.5, "1n2g": 199.25, "2n2g": 380.75}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes, path = make_nodes(tmp_path_factory.mktemp("sshd"), 2, base_octet=71, gpus=2)
    yield nodes, path
    stop_nodes(nodes)


def host_suite(tmp_path: Path, record: Path, time_scale: str = "0.03") -> Path:
    data = yaml.safe_load((ROOT / "dlperf_tasks/catalog/suites/pytorch-bert.yaml").read_text())
    data["id"] = "pytorch-bert-host"
    data["container"] = None
    data["launcher"]["workdir"] = str(STANDIN / "workspace/examples/bert")
    data["launcher"]["node_files_dir"] = str(ROOT / "dlperf_tasks/catalog/data")  # host runtime: BERT-base config
    data["gradient_accumulation_steps"] = [1]  # one cell per topology (accumulation cells: test_standin_strict_cluster)
    data.pop("exclude", None)
    data["env"] = {"PYTHONPATH": str(STANDIN / "usr/lib/python3/dist-packages"),
                   "DLPERF_STANDIN_TIME_SCALE": time_scale, "DLPERF_STANDIN_RECORD": str(record),
                   **{f"DLPERF_STANDIN_SPEED_{t.upper()}": str(v) for t, v in SPEEDS.items()}}
    data["env_multi_node"] = {}
    data["window"] = {"warmup": 5, "measure": 20}
    data["topologies"] = list(SPEEDS)
    data["batch_sizes"] = {"fp32": [32], "amp": [64]}
    p = tmp_path / "pytorch-bert-host.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def idle(path: Path, *outs: Path) -> None:
    """No process of the sweeps' trials (written to ``outs``) is left on any node, and no lease (other
    test files' trials may run on this machine at the same time: only these trials' marks count)."""
    keys = {json.loads(f.read_text())["trial"]["trial_key"] for out in outs for f in (out / "trials").glob("*.json")}
    assert keys
    c = Cluster.from_yaml(path)
    with SSHPool(c) as pool:
        for n in c.names:
            assert [p for k in sorted(keys) for p in HostRuntime().leftovers(pool, n, "any", k)] == [], n
            assert pool.run(n, f"ls {c.node(n).workdir}/.lease 2>/dev/null || true").stdout.strip() == ""


def test_sweep_exact_speeds_and_rerun(cluster, tmp_path, capsys):
    nodes, path = cluster
    record = tmp_path / "record.jsonl"
    suite = host_suite(tmp_path, record)
    out = tmp_path / "out"
    rc = main(["sweep", "--suite", str(suite), "--cluster", str(path), "--out", str(out), "--precisions", "fp32",
               "--trials", "2", "--no-env-capture"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "iteration" in err and "node1" in err
    result = json.loads((out / "result.json").read_text())
    cells = {c["topology"]: c for c in result["cells"]}
    assert {t: cells[t]["median_speed"] for t in SPEEDS} == SPEEDS
    assert cells["2n2g"]["speedup"] == pytest.approx(round(380.75 / 101.5, 2))
    for c in result["cells"]:
        for t in c["trials"]:
            assert len(t["node_names"]) == int(c["topology"][0])
    two = cells["2n2g"]["trials"][0]
    assert two["node_names"] == ["node1", "node2"]
    # every rank ran with the expected launch arguments: node ranks 0/1, master = node1's address
    recs = [json.loads(line) for line in record.read_text().splitlines()]
    multi = [r for r in recs if r["world"] == 4]
    assert sorted(r["rank"] for r in multi) == sorted([0, 1, 2, 3] * 2)
    master = Cluster.from_yaml(path).node("node1").host
    assert all(r["env"].get("MASTER_ADDR") == master for r in multi)
    assert all(r["batch_size_per_device"] == 32 and r["iters"] >= 25 for r in recs)
    assert (out / "report.md").read_text().startswith("# dlperf result")
    idle(path, out)

    # delete one trial file: the re-run runs exactly that trial
    files = sorted((out / "trials").glob("*.json"))
    assert len(files) == 6
    files[0].unlink()
    before = len(record.read_text().splitlines())
    rc = main(["sweep", "--suite", str(suite), "--cluster", str(path), "--out", str(out), "--precisions", "fp32",
               "--trials", "2", "--no-env-capture"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "5 trial(s) already valid" in err
    assert len(list((out / "trials").glob("*.json"))) == 6
    assert len(record.read_text().splitlines()) > before
    idle(path, out)


CHILD = r"""
import sys
sys.path.insert(0, {root!r})
from dlperf_tasks.cli import main
sys.exit(main(["sweep", "--suite", {suite!r}, "--cluster", {cluster!r}, "--out", sys.argv[1], "--precisions", "fp32",
               "--topologies", "1n1g", "--trials", "3", "--no-env-capture", "--wait-for-nodes", "60"]))
"""


def test_two_sweeps_never_share_a_node(cluster, tmp_path):
    nodes, path = cluster
    record = tmp_path / "record.jsonl"
    suite = host_suite(tmp_path, record, time_scale="0.1")
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(ROOT), suite=str(suite), cluster=str(path)))
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / f"out{i}")], stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    errs = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    spans = []  # (node, start, end, sweep)
    for i in range(2):
        for f in (tmp_path / f"out{i}" / "trials").glob("*.json"):
            t = json.loads(f.read_text())["trial"]
            for n in t["node_names"]:
                spans.append((n, t["started_at"], t["finished_at"], i))
    assert len(spans) == 6
    for a in spans:
        for b in spans:
            if a[0] == b[0] and a[3] != b[3]:
                assert a[2] <= b[1] or b[2] <= a[1], (a, b)
    idle(path, tmp_path / "out0", tmp_path / "out1")
