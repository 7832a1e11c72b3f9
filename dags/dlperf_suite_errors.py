"""Reports the suite files of the catalog that do not load (an import error of this module only,
naming file, line and key); builds no DAG, so no dlperf DAG is lost to a broken site suite
(dlperf_tasks.airflow.dag_modules)."""

from dlperf_tasks.airflow.dag_modules import build_module

globals().update(build_module(__file__))
