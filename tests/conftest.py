"""Shared pytest setup. Heavy fixtures (simulated cluster, S3 server, Airflow) live in
tests/fixtures/*.py and are loaded as plugins so each area owns its own file."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = [
    p
    for p in ("tests.fixtures.cluster", "tests.fixtures.slurm", "tests.fixtures.s3", "tests.fixtures.airflow_env")
    if (ROOT / (p.replace(".", "/") + ".py")).exists()
]
