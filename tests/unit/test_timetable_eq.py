"""DAG parse cost: comparing two dlperf timetables (Airflow compares DAGs, hence
their schedules, whenever a mapped task joins a task group) must not import
``airflow.serialization.encoders`` (~60 ms of every parse), and must still mean what Airflow's
``CronMixin.__eq__`` means: same cron expression, same time zone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("airflow")

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import sys
from dlperf_tasks.airflow.timetable import nightly
a, b, c = nightly("0 2 * * *"), nightly("0 2 * * *"), nightly("0 3 * * *")
assert a == b and hash(a) == hash(b) and a != c and a == a
assert "airflow.serialization.encoders" not in sys.modules, "encoders imported by a timetable comparison"
from airflow.timetables.trigger import CronTriggerTimetable
assert a == CronTriggerTimetable("0 2 * * *", timezone="UTC")  # a stock timetable: Airflow's own rule
print("ok")
"""


def test_timetable_equality_without_the_serialization_import(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "AIRFLOW_HOME": str(tmp_path / "airflow")}
    p = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env=env)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
