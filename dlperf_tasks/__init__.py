"""dlperf: scheduled deep-learning training benchmarks (DLPerf, automated).

The packages form layers; each imports only lower ones (docs/architecture.md has the table,
tests/unit/test_architecture.py enforces it): ``core`` <- ``policy`` <- ``frameworks`` <- ``catalog``
<- ``measure`` <- ``report`` <- ``store`` / ``remote`` <- ``telemetry`` <- ``history`` <- ``engine``
<- ``web`` <- ``cli`` <- ``airflow`` (the only package that imports Airflow). ``smoke`` is a
stand-alone program run on the nodes; ``dags/`` and ``plugins/`` are the Airflow entry points.
"""

__version__ = "0.1.0"
