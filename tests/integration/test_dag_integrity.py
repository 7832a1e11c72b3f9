"""Every dlperf DAG loads in a real Airflow DagBag: no import errors, the expected ids,
tasks, params and schedules, and the dags/ folder parses fast (the time is recorded in
tests/_artifacts/dag_parse_time.json)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "dlperf_mxnet": {"mxnet-bert", "mxnet-resnet50"},
    "dlperf_pytorch": {"pytorch-bert"},
    "dlperf_tensorflow": {"tensorflow-bert"},
    "dlperf_megatron": {"megatron-gpt"},
    "dlperf_smoke": {"smoke"},
}
TASKS = ["plan", "prepare", "trial", "adaptive_more", "trial_more", "collect", "aggregate", "report", "publish",
         "cleanup", "confirm_plan", "confirm_trigger"]
# plan -> ... -> publish -> cleanup; trial_more (adaptive) after trial; the A/B follow-up after publish
EDGES = ["plan", "prepare", "trial", "trial_more", "collect", "aggregate", "report", "publish", "cleanup"]
PARSE_BUDGET_S = 1.0  # generous: the measured figure is recorded below


@pytest.fixture(scope="module")
def dagbag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_no_import_errors_and_expected_dag_ids(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) >= set(EXPECTED)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_tasks_params_schedule(dagbag, dag_id):
    from dlperf_tasks.airflow import params
    from dlperf_tasks.catalog import load_suite

    dag = dagbag.dags[dag_id]
    assert dag.task_ids == TASKS
    assert dag.catchup is False and dag.max_active_runs == 1
    name = dag_id.removeprefix("dlperf_")
    # the embedded default arms no nightly cron ([dlperf] nightly = false): manual only, and the DAG
    # page says so and names the cron that nightly = true would arm (the cron timetable itself:
    # test_dag_schedule.py, test_catalog_schedule.py)
    assert type(dag.timetable).__name__ == "NullTimetable"
    (cron,) = {load_suite(s).schedule for s in EXPECTED[dag_id]}
    assert "manual triggers only" in dag.doc_md and f"`{cron}`" in dag.doc_md
    # the form shows the fields that apply to this DAG's suites: no A/B confirmation editor,
    # xla only where a suite sweeps XLA, image_tag only for container suites
    from dlperf_tasks.airflow import form

    per_dag = {"xla", "image_tag"}
    want = (set(params.schemas([])) - per_dag - {"confirm"}) | form.applicable(EXPECTED[dag_id])
    assert set(dag.params.keys()) == want
    assert ("xla" in want) == (dag_id == "dlperf_tensorflow") and ("image_tag" in want) == (dag_id != "dlperf_smoke")
    assert set(dag.params.get_param("suites").schema["items"]["enum"]) == EXPECTED[dag_id]
    # edges: plan -> prepare -> trial -> trial_more -> collect -> aggregate -> report -> publish -> cleanup
    for up, down in [*zip(EDGES, EDGES[1:]), ("publish", "confirm_plan"), ("confirm_plan", "confirm_trigger")]:
        assert down in dag.get_task(up).downstream_task_ids, f"{up} -> {down}"
    trial = dag.get_task("trial")
    assert trial.pool == "dlperf_nodes"
    assert dag.get_task("cleanup").is_teardown
    outlets = [a.uri for a in dag.get_task("publish").outlets]
    assert outlets == [f"dlperf://results/{name}"]


def test_parse_time_of_the_dags_folder_recorded(airflow_home):
    """Time to execute every file in dags/ in a fresh interpreter that already imported
    airflow.sdk (what the dag-processor pays per parse), best of 3."""
    code = (
        "import time, runpy, glob, airflow.sdk\n"
        "best = 1e9\n"
        "for _ in range(3):\n"
        "    import sys\n"
        "    for m in [m for m in sys.modules if m.startswith('dlperf_tasks')]: del sys.modules[m]\n"
        "    t = time.perf_counter()\n"
        f"    for f in sorted(glob.glob({str(ROOT / 'dags')!r} + '/*.py')): runpy.run_path(f)\n"
        "    best = min(best, time.perf_counter() - t)\n"
        "cold = None\n"
        "print(best)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seconds = float(out.stdout.strip().splitlines()[-1])
    art = ROOT / "tests" / "_artifacts"
    art.mkdir(exist_ok=True)
    (art / "dag_parse_time.json").write_text(json.dumps({"dags_folder_parse_s": round(seconds, 4),
                                                         "budget_s": PARSE_BUDGET_S, "goal_s": 0.3}) + "\n")
    print(f"dags/ parse time: {seconds:.3f} s")
    assert seconds < PARSE_BUDGET_S


def test_parsing_imports_nothing_heavy(airflow_home):
    modules = sorted(str(p) for p in (ROOT / "dags").glob("*.py"))
    assert len(modules) >= 6  # one module per DAG + the site catch-all
    code = ("import sys, runpy, airflow.sdk\n"
            f"dags = [d for m in {modules!r} for d in runpy.run_path(m).values() if type(d).__name__ == 'DAG']\n"
            "assert len(dags) >= 5, dags\n"
            "heavy = [m for m in ('pandas', 'boto3', 'paramiko', 'docker', 'matplotlib', 'torch') if m in sys.modules]\n"
            "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
