"""dlperf: scheduled deep-learning training benchmarks (DLPerf, automated).

Pure-logic modules (catalog, plan, frameworks, stats, report, store, history,
remote) import no Airflow; only ``dlperf_tasks.airflow`` does.
"""

__version__ = "0.1.0"
