"""The compiled scanners are reached only through frameworks/_native.py; DLPERF_PURE_PYTHON switches them
off without editing code, and ``dlperf --version`` says which are in use (never silent)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DLPERF = str(Path(sys.executable).with_name("dlperf"))


def _version(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DLPERF_PURE_PYTHON"}
    if value is not None:
        env["DLPERF_PURE_PYTHON"] = value
    out = subprocess.run([DLPERF, "--version"], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_version_names_the_scanners_in_use_and_the_switch_turns_them_off():
    assert _version(None) == "compiled scanners: _cdll, _cmxbert"
    off = _version("1")
    assert "_cdll off (DLPERF_PURE_PYTHON is set)" in off and "_cmxbert off" in off and "same results" in off
    assert "is not a yes/no value" in _version("maybe")
    assert _version("0") == "compiled scanners: _cdll, _cmxbert"


def test_only_the_seam_imports_the_extensions():
    seen = []
    for path in (ROOT / "dlperf_tasks").rglob("*.py"):
        if path.name != "_native.py" and re.search(r"\b_c(dll|mxbert)\b(?!\.c)", path.read_text()):
            text = path.read_text()
            if re.search(r"import\s+[^\n]*\b_c(dll|mxbert)\b|frameworks\._c(dll|mxbert)\b", text):
                seen.append(str(path.relative_to(ROOT)))
    assert seen == []
