"""dlperf: scheduled deep-learning training benchmarks (DLPerf, automated).

Pure-logic modules (catalog, plan, frameworks, stats, report, store, history,
remote) import no Airflow; only the scheduler layer (its own subpackage) does.
"""

__version__ = "0.1.0"
