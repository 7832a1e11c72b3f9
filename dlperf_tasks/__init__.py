"""dlperf: scheduled deep-learning training benchmarks (DLPerf, automated).

The packages form layers; each imports only lower ones (docs/architecture.md has the table,
tests/unit/test_architecture.py enforces it): ``core`` <- ``policy`` <- ``frameworks`` <- ``catalog``
<- ``measure`` <- ``report`` <- ``store`` / ``remote`` <- ``telemetry`` <- ``history`` <- ``engine``
<- ``web`` <- ``cli`` <- the scheduler layer (the only package that imports the scheduler).
``smoke`` is a stand-alone program run on the nodes; ``dags/`` and ``plugins/`` are the scheduler's
entry points.
"""

__version__ = "0.1.0"
