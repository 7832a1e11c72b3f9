"""Layering: only ``dlperf_tasks/airflow/`` knows the scheduler (not even a comment elsewhere),
the engine and the CLI import no scheduler code, and the run engine stays in small modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "dlperf_tasks"


def test_the_word_appears_only_in_the_scheduler_layer():
    hits = [f"{p.relative_to(PKG.parent)}:{i}" for p in PKG.rglob("*.py") if "airflow" not in p.relative_to(PKG).parts[:1]
            for i, line in enumerate(p.read_text().splitlines(), 1) if "airflow" in line]
    assert hits == []


def test_engine_sweep_and_cli_import_no_scheduler_code():
    code = ("import sys, dlperf_tasks.engine.setup, dlperf_tasks.engine.trials, dlperf_tasks.engine.finish, "
            "dlperf_tasks.engine.schedule, dlperf_tasks.engine.sweep, dlperf_tasks.cli, dlperf_tasks.core.settings; "
            "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_engine_modules_and_functions_stay_small():
    for p in [*(PKG / "engine").glob("*.py"), PKG / "core" / "settings.py", PKG / "remote" / "local.py",
              PKG / "remote" / "nodeclean.py", PKG / "airflow" / "tasks.py"]:
        text = p.read_text()
        assert len(text.splitlines()) <= 400, p
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 <= 80, f"{p.name}:{node.name}"
