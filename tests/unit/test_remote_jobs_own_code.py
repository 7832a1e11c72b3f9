"""``remote/jobs.py`` is this project's own code: it shares no run of six or more lines with the
Airflow SSH provider's ``remote_job.py`` (the installed one), which an earlier version copied.

Lines are compared after dropping blank lines and comments (also trailing ones) and folding
white space, so a re-indented or re-commented copy is still found."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = 6


def _provider_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("airflow")  # finds the package without importing Airflow
    assert spec is not None and spec.submodule_search_locations, "apache-airflow is not installed"
    for base in spec.submodule_search_locations:
        hits = sorted(Path(base).glob("providers/ssh/**/remote_job.py"))
        if hits:
            return hits[0]
    pytest.fail("apache-airflow-providers-ssh's remote_job.py is not installed (it is a dependency)")


def _code_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        s = re.sub(r"\s+", " ", re.sub(r"\s#.*$", "", line)).strip()
        if s and not s.startswith("#"):
            out.append(s)
    return out


def shared_runs(a: list[str], b: list[str], n: int = RUN) -> list[list[str]]:
    windows = {tuple(b[i:i + n]) for i in range(len(b) - n + 1)}
    return [a[i:i + n] for i in range(len(a) - n + 1) if tuple(a[i:i + n]) in windows]


def test_the_check_finds_a_copied_block():
    provider = _code_lines(_provider_file().read_text())
    assert len(provider) > 100
    pasted = ["x = 1"] + [f"    {line}  # renamed comment" for line in provider[40:47]] + ["y = 2"]
    assert shared_runs(_code_lines("\n".join(pasted)), provider)


def test_jobs_module_shares_no_block_with_the_ssh_provider():
    ours = _code_lines((ROOT / "dlperf_tasks" / "remote" / "jobs.py").read_text())
    provider = _code_lines(_provider_file().read_text())
    assert shared_runs(ours, provider) == []
