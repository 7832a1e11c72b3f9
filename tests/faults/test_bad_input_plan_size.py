"""Bad input: plans too big to exist.

``--trials 9999999999``, a 32-digit node count, a conf topology ``99999999999n8g`` (it fitted the
form's maxLength) used to make planning loop and take gigabytes, and batch sizes 1..4096 x 20
trials from the form mapped 491,520 tasks. Now: sizes are checked before anything is expanded
(``plan.py``), the form's lists are bounded (``airflow/params.py``), and a run that would map more
than ``[core] max_map_length`` trial tasks is refused by the plan task naming the fields. Driven
through the CLI in a fresh process (so a loop is a timeout, not a hung test), Airflow's own
``ParamsDict`` and a real ``dag.test()`` of the ``dlperf_smoke`` DAG loaded from ``dags/``.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import PlanError
from dlperf_tasks.catalog.plan import Overrides, plan

ROOT = Path(__file__).resolve().parents[2]
BIG_NODES = "1" * 32


@pytest.mark.parametrize("argv, words", [
    (["plan", "tensorflow-bert", "--trials", "9999999999"], "trials: 9999999999 is more than the maximum"),
    (["plan", "smoke", "--topologies", f"{BIG_NODES}n8g"], "is too large (at most 4096 nodes"),
    (["plan", "smoke", "--topologies", "99999999999n8g"], "is too large (at most 4096 nodes"),
    (["plan", "smoke", "--topologies", "1n99999g"], "64 GPUs per node"),
    (["plan", "tensorflow-bert", "--batch-sizes", ",".join(map(str, range(1, 4097))), "--trials", "20"],
     "plan too large: up to 1966080 trials (batch_sizes 4096 x precisions 2 x xla 2 x topologies 6 x trials 20)"),
])
def test_cli_refuses_huge_plans_at_once_naming_the_field(argv, words):
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "dlperf_tasks", *argv], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    took = time.monotonic() - t0
    assert res.returncode == 2, (res.returncode, res.stderr[-500:])
    assert res.stderr.startswith("dlperf: error: ") and words in res.stderr, res.stderr[-500:]
    assert "Traceback" not in res.stderr and took < 20


def test_library_checks_sizes_before_expanding():
    suite = load_suite("tensorflow-bert")
    with pytest.raises(PlanError, match=r"plan too large: .*cells from batch_sizes 16 x .*at most 100"):
        plan(suite, Overrides.from_dict({"batch_sizes": list(range(1, 17))}), max_trials=100)
    with pytest.raises(PlanError, match="trials: 101 is more than"):
        Overrides.from_dict({"trials": 101})
    assert len(plan(suite).trials) <= 1000  # the suite's own plan still works


@pytest.mark.parametrize("conf, param", [
    ({"topologies": ["99999999999n8g"]}, "topologies"),
    ({"topologies": [f"{BIG_NODES}n8g"]}, "topologies"),
    ({"batch_sizes": list(range(1, 4097))}, "batch_sizes"),
    ({"topologies": [f"{n}n1g" for n in range(1, 18)]}, "topologies"),
    ({"precisions": ["fp32", "amp", "fp32"]}, "precisions"),
])
def test_the_form_schema_bounds_lists_and_node_counts(conf, param):
    """Airflow's own ParamsDict (what the UI form and the REST trigger validate with)."""
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from dlperf_tasks.airflow.form import dag_params

    pd = ParamsDict(dag_params(["smoke"]))
    with pytest.raises(ParamValidationError, match=param):
        pd.update(conf)
        pd.validate()


def _smoke_dag(dlperf_dirs):
    """The dlperf_smoke DAG as Airflow loads it: the real dags/ module through the DAG factory."""
    return runpy.run_path(str(ROOT / "dags" / "dlperf_smoke.py"))["dlperf_smoke"]


def _states(dr) -> dict[str, str]:
    return {f"{ti.task_id}:{ti.map_index}": str(getattr(ti.state, "value", ti.state)) for ti in dr.get_task_instances()}


def test_dag_run_over_max_map_length_fails_in_plan_naming_the_fields(airflow_db, dlperf_dirs):
    """16 batch sizes x 2 precisions x 8 topologies x 20 trials = 5120 trial tasks for the smoke
    suite (each list within the form's bounds) > max_map_length: the plan task fails at once
    with the fields named, no trial task is created and no run directory is written."""
    from airflow.configuration import conf as af_conf

    from dlperf_tasks.airflow.params import ParamsError, validate_conf

    limit = af_conf.getint("core", "max_map_length")
    conf = {"batch_sizes": list(range(1, 17)), "precisions": ["fp32", "amp"], "trials": 20,
            "topologies": [f"1n{g}g" for g in range(1, 9)]}
    with pytest.raises(ParamsError, match=rf"^(suites/)?batch_sizes/precisions/xla/topologies/trials: .*5120 "
                                          rf".*max_map_length = {limit}"):
        validate_conf(conf, ["smoke"])
    work = Path(dlperf_dirs["work"])
    before = set(work.rglob("plan.json")) if work.exists() else set()
    t0 = time.monotonic()
    dr = _smoke_dag(dlperf_dirs).test(run_conf=conf)
    states = _states(dr)
    assert str(getattr(dr.state, "value", dr.state)) == "failed", states
    assert states.get("plan:-1") == "failed", states
    assert not [k for k in states if k.startswith("trial:") and not k.endswith(":-1")], states
    assert (set(work.rglob("plan.json")) if work.exists() else set()) == before
    assert time.monotonic() - t0 < 120


def test_dag_run_with_a_huge_conf_topology_is_refused(airflow_db, dlperf_dirs):
    """``99999999999n8g`` in a conf: refused (form schema / plan task), never planned."""
    dag = _smoke_dag(dlperf_dirs)
    t0 = time.monotonic()
    try:
        dr = dag.test(run_conf={"topologies": ["99999999999n8g"]})
    except Exception as exc:  # Airflow validates the params before the run starts
        assert "topologies" in str(exc), exc
    else:
        assert str(getattr(dr.state, "value", dr.state)) == "failed"
        assert _states(dr).get("plan:-1") == "failed"
    assert time.monotonic() - t0 < 120


def test_the_limit_counts_every_suite_of_the_dag_run():
    """dlperf_mxnet maps both of its suites in one run: 160 + 240 trials > 300 although each fits."""
    from dlperf_tasks.airflow.params import ParamsError, check_map_length

    params = {"suites": [], "trials": 20}
    check_map_length(params, ["mxnet-bert", "mxnet-resnet50"], limit=400)
    with pytest.raises(ParamsError, match=r"maps 400 trial tasks \(mxnet-bert 160, mxnet-resnet50 240\), "
                                          r"more than \[core\] max_map_length = 300"):
        check_map_length(params, ["mxnet-bert", "mxnet-resnet50"], limit=300)
