"""Adding a framework = one framework module + one suite YAML + its trainer's log format: a toy
framework written into a temporary catalog directory (``$DLPERF_CATALOG_PATH``), with no edit
anywhere in the package, gets its DAG (real Airflow: built, then run with ``dag.test()`` on the
local runtime), its plan, its sweep and its extraction."""

from __future__ import annotations

import json
import textwrap

import pytest

from dlperf_tasks.cli import main

pytestmark = [pytest.mark.airflow]

FRAMEWORK = '''
"""Toy: one process per node prints ``toy step=<i> speed=<samples/s>``."""
import re
import statistics
import sys
from pathlib import Path

from dlperf_tasks.frameworks.base import Framework, LaunchSpec
from dlperf_tasks.core.model import LogFacts, MetricKind, ParsedLog, Sample, TrialMetric

LINE = re.compile(r"toy step=(\\d+) speed=(\\S+)")


class Toy(Framework):
    name = "toy_fw"
    log_framework, log_model, log_prefix = "toy", "toynet", "toynet"
    metric_kind = MetricKind.THROUGHPUT

    def launch(self, trial, node_rank, nodes, settings):
        script = str(Path(__file__).resolve().parent.parent / "toy_trainer.py")
        return LaunchSpec([str(settings.get("python", sys.executable)), script, str(trial.cell.window.total),
                           str(settings.get("speed", 100.0))])

    def parse(self, lines):
        out = ParsedLog(facts=LogFacts())
        for line in lines:
            out.facts.lines += 1
            m = LINE.search(line)
            if m:
                it = int(m.group(1))
                out.samples.append(Sample(it, float(m.group(2)), "samples/s"))
                out.facts.iterations_seen.append(it)
            elif "Traceback" in line:
                out.facts.crash_markers.append("Traceback")
        out.facts.iterations_seen = sorted(set(out.facts.iterations_seen))
        return out

    def trial_metric(self, parsed, cell, window, span=None):
        vals = [s.value for s in parsed.samples if window.warmup < s.iteration <= window.total]
        return TrialMetric(statistics.fmean(vals))
'''

TRAINER = '''
import sys
n, speed = int(sys.argv[1]), float(sys.argv[2])
for i in range(1, n + 1):
    print(f"toy step={i} speed={speed + i % 2}", flush=True)
'''

SUITE = """
id: toy
framework: toy_fw
dag: toy
schedule: "15 2 * * 1"
model: toynet
description: A toy framework added without touching the package.
container: null
upstream: null
launcher: {speed: 250.0}
env: {}
window: {warmup: 2, measure: 6}
trials: 2
batch_sizes: [4]
precisions: [fp32]
xla: [false]
topologies: [1n1g]
timeout_s: 120
hang_timeout_s: 60
"""


@pytest.fixture
def toy_catalog(tmp_path, monkeypatch):
    d = tmp_path / "catalog"
    (d / "frameworks").mkdir(parents=True)
    (d / "frameworks" / "toy_fw.py").write_text(textwrap.dedent(FRAMEWORK))
    (d / "toy_trainer.py").write_text(TRAINER)
    (d / "toy.yaml").write_text(SUITE)
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(d))
    from dlperf_tasks import frameworks

    frameworks._CACHE.pop("toy_fw", None)
    return d


def test_toy_framework_plans_sweeps_and_extracts(toy_catalog, tmp_path, capsys):
    assert main(["plan", "toy"]) == 0
    assert "toy/bz4/fp32/1n1g" in capsys.readouterr().out
    out = tmp_path / "sweep"
    assert main(["sweep", "--suite", "toy", "--cluster", "local", "--out", str(out), "--quiet"]) == 0
    result = json.loads((out / "result.json").read_text())
    (cell,) = result["cells"]
    assert cell["n_valid"] == 2 and cell["median_speed"] == pytest.approx(250.5)
    assert (out / "logs/toy/toynet/bz4/1n1g/toynet_b4_fp32_1.log").is_file()
    capsys.readouterr()
    assert main(["extract", "--suite", "toy", "--log-dir", str(out / "logs"), "--format", "json"]) == 0
    extracted = json.loads(capsys.readouterr().out)
    assert [c["median_speed"] for c in extracted["cells"]] == [cell["median_speed"]]


def test_toy_framework_gets_its_dag_and_it_runs(toy_catalog, airflow_db, tmp_path):
    from dlperf_tasks.airflow import dag_factory
    from dlperf_tasks.airflow import settings as settings_mod
    from dlperf_tasks.airflow.settings import DlperfSettings

    cfg = DlperfSettings(store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "work"), nightly=True)
    dags = dag_factory.build_all(cfg)
    dag = dags["dlperf_toy"]
    assert dag.dag_id == "dlperf_toy" and "trial" in dag.task_ids
    # with ``[dlperf] nightly`` the suite's ``schedule:`` is the DAG's cron; ``[dlperf] schedule_toy``
    # overrides it (none = manual)
    assert dag.timetable.summary == "15 2 * * 1"
    vals = {"schedule_toy": "none", "store_url": cfg.store_url, "work_dir": cfg.work_dir}
    manual = dag_factory.build_all(settings_mod.load(lambda k, d: vals.get(k, d)))["dlperf_toy"]
    assert type(manual.timetable).__name__ == "NullTimetable"
    dr = dag.test(run_conf={"trials": 1})
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    (pub,) = json.loads((tmp_path / "work" / "last-toy.json").read_text())["published"]
    assert pub["location"].startswith(f"file://{tmp_path / 'store'}/runs/toy/")


def test_unknown_conf_field_fails_plan_at_once_with_the_error_in_the_note(toy_catalog, airflow_db, tmp_path):
    """Airflow accepts conf keys the form does not declare; the plan task refuses them within
    seconds (before any node is touched) and the DAG run's note says why."""
    import time

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from dlperf_tasks.airflow import dag_factory
    from dlperf_tasks.airflow.settings import DlperfSettings

    cfg = DlperfSettings(store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "work"))
    dag = dag_factory.build_all(cfg)["dlperf_toy"]
    t0 = time.monotonic()
    dr = dag.test(run_conf={"trails": 1})
    assert str(getattr(dr.state, "value", dr.state)) == "failed"
    assert time.monotonic() - t0 < 60
    with create_session() as session:
        note = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id, DagRun.run_id == dr.run_id).one().note
    assert note and "trails" in note and note.startswith("plan failed"), note
    assert not (tmp_path / "store").exists()


def test_a_dry_run_publishes_nothing_and_notes_the_commands(toy_catalog, airflow_db, tmp_path):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from dlperf_tasks.airflow import dag_factory
    from dlperf_tasks.airflow.settings import DlperfSettings

    cfg = DlperfSettings(store_url=f"file://{tmp_path / 'store'}", work_dir=str(tmp_path / "work"))
    dag = dag_factory.build_all(cfg)["dlperf_toy"]
    dr = dag.test(run_conf={"trials": 1, "dry_run": True})
    states = {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}
    assert states["publish"] == "skipped" and states["trial"] == "success", states
    with create_session() as session:
        note = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id, DagRun.run_id == dr.run_id).one().note
    assert note.startswith("dry run (nothing published); would run:") and "toy_trainer.py" in note, note
    # nothing published: no run and no index in the store (its private staging area may hold the plan)
    assert not (tmp_path / "store" / "runs").exists() and not (tmp_path / "store" / "index").exists()
    last = json.loads((tmp_path / "work" / "last-toy.json").read_text())
    assert last["dry_run"] and last["published"] == [] and "toy_trainer.py" in last["commands"][0]
