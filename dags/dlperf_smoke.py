"""dlperf_smoke: built from the suite catalog by dlperf_tasks.airflow.dag_modules (a broken suite of
this DAG is this file's import error only; the other dlperf DAGs still load)."""

from dlperf_tasks.airflow.dag_modules import build_module

globals().update(build_module(__file__))
