"""dlperf DAGs of site suite groups that have no module of their own here (the five built-in
groups each have theirs: dlperf_mxnet.py, dlperf_pytorch.py, ...), built from the suite catalog
by dlperf_tasks.airflow.dag_modules. A broken suite file is left out and reported by dlperf_suite_errors.py."""

from dlperf_tasks.airflow.dag_modules import build_module

globals().update(build_module(__file__))
