"""dlperf DAGs: one per framework (dlperf_mxnet, dlperf_pytorch, ..., dlperf_smoke), built
from the suite catalog by dlperf_tasks.airflow.dag_factory. Keep this file a few lines."""

from dlperf_tasks.airflow.dag_factory import build_all

globals().update(build_all())
