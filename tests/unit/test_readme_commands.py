"""The README's commands as a newcomer pastes them: the block marked
``<!-- tested: tests/unit/test_readme_commands.py -->`` runs line by line in bash, as printed
(quoting included; ``dlperf`` is this checkout), except lines marked ``(needs your cluster)``,
which are parsed by the real ``dlperf`` parser; and every ``dlperf`` line of every README code block
parses and has no unquoted ``&``, ``;`` or ``|`` (the S3/OSS publish example's ``&`` sent the
command to the background)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- tested: tests/unit/test_readme_commands.py -->"
NEEDS_CLUSTER = "(needs your cluster)"


def _blocks(text: str) -> list[tuple[bool, list[str]]]:
    """(tested?, lines) of every ```bash block; continued lines joined."""
    out = []
    for m in re.finditer(r"(?P<pre>[^\n]*)\n```bash\n(?P<body>.*?)\n```", text, re.S):
        body = m["body"].replace("\\\n", " ")
        out.append((m["pre"].strip() == MARK, [x for x in body.splitlines() if x.strip()]))
    return out


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _dlperf_lines() -> list[str]:
    lines = []
    for _, block in _blocks(_readme()):
        for x in block:
            words = shlex.split(x, comments=True)
            words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # VAR=value prefixes
            if words[:1] == ["dlperf"]:
                lines.append(x)
    return lines


def test_the_readme_has_one_tested_block_with_the_five_steps():
    tested = [b for t, b in _blocks(_readme()) if t]
    assert len(tested) == 1 and len(tested[0]) == 5, tested
    assert _readme().splitlines()[2:7][0] == "```bash"  # the first lines: the two commands, as CI reads them


@pytest.mark.parametrize("line", _dlperf_lines())
def test_every_dlperf_line_parses_and_has_no_unquoted_shell_operator(line):
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.commenters = "#"
    tokens = list(lex)
    bad = [t for t in tokens if t and set(t) <= set("&;|<>()")]
    assert not bad, f"unquoted shell operator {bad} in README line: {line}"
    words = [w for w in shlex.split(line, comments=True) if not re.match(r"^[A-Z_]+=", w)]
    try:
        build_parser().parse_args(words[1:])
    except SystemExit:
        pytest.fail(f"README line does not parse: {line}")


def test_the_tested_block_runs_as_printed(tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "dlperf"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m dlperf_tasks "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "DLPERF_STORE_URL": f"file://{tmp_path / 'store'}", "DLPERF_WORK_DIR": str(tmp_path / "work")}
    block = next(b for t, b in _blocks(_readme()) if t)
    ran = 0
    for line in block:
        if NEEDS_CLUSTER in line:
            continue
        p = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"README line failed ({p.returncode}): {line}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
        ran += 1
        if "--dry-run" in line:
            assert "nothing runs" in p.stdout + p.stderr and "docker run" in p.stdout + p.stderr
    assert ran >= 2 and (tmp_path / "my-cluster.yaml").is_file()
