"""Tiny-size runs of every bench/ script so they cannot rot (the real sizes are in bench/README.md).

Each script is run as a user would (its ``main(argv)``, which starts fresh worker processes),
on a tiny input, and its JSON numbers are checked for sense: all generated trials valid,
the scheduler's packed makespan between the lower bound and sequential, plan/expansion counts
consistent. No mocks: real extraction, real scheduler, real DAG factory and Airflow config.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(60)
def test_bench_extract_tiny(tmp_path, capsys):
    out = tmp_path / "extract.json"
    rc = _load("bench_extract").main(["--size-mb", "1.5", "--big-file-mb", "1", "--no-tar", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "MB/s" in text and "goal" in text
    d = json.loads(out.read_text())
    for suite in ("mxnet-bert", "pytorch-bert", "tensorflow-bert", "mxnet-resnet50"):
        assert d[suite]["trials"] > 0 and d[suite]["ok"] == d[suite]["trials"], (suite, d[suite])
        assert d[suite]["mb_per_s"] > 0
    assert d["big_file"]["ok"] == 1 and d["big_file"]["bytes"] >= 1e6


@pytest.mark.timeout(30)
def test_bench_makespan_simulation(tmp_path, capsys):
    out = tmp_path / "makespan.json"
    rc = _load("bench_makespan").main(["--sim-only", "--trials", "5", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "packed" in text and "goal" in text
    s = json.loads(out.read_text())["sim_fixed"]
    # 30 fixed-length trials, 4 nodes: node-seconds 5*(1+1+1+1+2+4)*3 / 4 = 37.5 s
    assert s["bound"] == pytest.approx(37.5)
    assert s["bound"] <= s["packed"] < s["sequential"] == pytest.approx(90.0)


@pytest.mark.timeout(60)
def test_bench_load_small(tmp_path, capsys):
    out = tmp_path / "load.json"
    rc = _load("bench_load").main(["--nodes", "4", "--trials", "1", "--policies", "packed",
                                   "--steps", "plan,simulate,expand", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    d = json.loads(out.read_text())
    assert d["plan"]["trials"] == d["simulate"]["jobs"] > 0
    assert d["simulate"]["packed"]["unschedulable"] == 0
    assert d["expand"]["max_map_length"] >= 1
    # every DAG except smoke maps exactly its suites' planned trials
    per_dag = {k: (x["mapped"], x["suites"]) for k, x in d["expand"]["dags"].items()}
    per_suite = {k: v["trials"] for k, v in d["plan"]["suites"].items()}
    for dag_id, (mapped, suites) in per_dag.items():
        assert mapped == sum(per_suite[s] for s in suites), \
            f"{dag_id}: plan task maps {mapped} trials, its suites plan {[(s, per_suite[s]) for s in suites]}"


@pytest.mark.timeout(60)
def test_bench_dag_parse_imports(tmp_path, capsys):
    out = tmp_path / "dagparse.json"
    rc = _load("bench_dag_parse").main(["--runs", "1", "--no-report", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    d = json.loads(out.read_text())
    assert d["dags"] >= 5  # one DAG per framework group
    assert 0 < d["median"]["dags_s"] < d["median"]["cold_s"]
