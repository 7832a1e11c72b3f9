"""scripts/durations-table.py sums pytest's --durations=0 lines per test file, slowest first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "durations-table.py"

LOG = """============================= slowest durations =============================
194.10s call     tests/integration/test_dag_schedule.py::test_real_scheduler_skips
30.00s setup    tests/integration/test_scale_out.py::test_two_celery_workers
12.50s call     tests/integration/test_dag_schedule.py::test_timetable
186.98s call     tests/integration/test_scale_out.py::test_two_celery_workers
0.40s teardown tests/unit/test_a.py::test_x
(2 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def run(*args, stdin=LOG):
    return subprocess.run([sys.executable, str(SCRIPT), *args], input=stdin, capture_output=True, text=True)


def test_files_summed_and_sorted_with_the_rest_counted():
    out = run("--min", "1").stdout.splitlines()
    assert out[2:4] == ["| `tests/integration/test_scale_out.py` | 217 |",
                        "| `tests/integration/test_dag_schedule.py` | 207 |"]
    assert out[4] == "| 1 other files | 0 |" and out[5].endswith("**424** |")


def test_output_without_durations_is_an_error():
    res = run(stdin="== 3 passed in 1.0s ==\n")
    assert res.returncode == 1 and "no '--durations=0' lines" in res.stderr
