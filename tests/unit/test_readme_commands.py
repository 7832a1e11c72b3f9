"""The README's commands as a newcomer pastes them into a NEW shell (no venv active, no ``dlperf``
on the PATH): the block marked ``<!-- tested: tests/unit/test_readme_commands.py -->`` runs line by
line in bash, as printed (quoting included; ``.venv/bin/dlperf`` is this checkout's), except lines
marked ``(needs your cluster)``, which are parsed by the real ``dlperf`` parser; the block marked
``<!-- tested: after make run -->`` runs against a store holding runs and is what ``make run``
prints at its end; and every ``dlperf`` line of every README code block parses and has no
unquoted ``&``, ``;`` or ``|`` (the S3/OSS publish example's ``&`` sent the command to the background)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from dlperf_tasks.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- tested: tests/unit/test_readme_commands.py -->"
AFTER_RUN = "<!-- tested: after make run -->"
DLPERF = ("dlperf", ".venv/bin/dlperf")
NEEDS_CLUSTER = "(needs your cluster)"


def _blocks(text: str, mark: str = MARK) -> list[tuple[bool, list[str]]]:
    """(marked with ``mark``?, lines) of every ```bash block; continued lines joined."""
    out = []
    for m in re.finditer(r"(?P<pre>[^\n]*)\n```bash\n(?P<body>.*?)\n```", text, re.S):
        body = m["body"].replace("\\\n", " ")
        out.append((m["pre"].strip() == mark, [x for x in body.splitlines() if x.strip()]))
    return out


def _new_shell_env(tmp_path: Path) -> dict[str, str]:
    """A new shell's environment: no venv active, no directory with a ``dlperf`` on the PATH."""
    path = [d for d in os.environ["PATH"].split(":") if d and not (Path(d) / "dlperf").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    return {**env, "PATH": ":".join(path), "DLPERF_STORE_URL": f"file://{tmp_path / 'store'}",
            "DLPERF_WORK_DIR": str(tmp_path / "work")}


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _dlperf_lines() -> list[str]:
    lines = []
    for _, block in _blocks(_readme()):
        for x in block:
            words = shlex.split(x, comments=True)
            words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # VAR=value prefixes
            if words[:1] and words[0] in DLPERF:
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
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")  # the checkout's venv, as `make run` left it
    env = _new_shell_env(tmp_path)
    assert subprocess.run(["bash", "-c", "command -v dlperf"], env=env, capture_output=True).returncode != 0
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


def test_what_make_run_prints_last_runs_in_a_new_shell(tmp_path):
    """The README's "after make run" block is what scripts/run-embedded.sh prints at its end, and
    each line runs as printed from the checkout in a new shell against a store holding runs."""
    from dlperf_tasks.store.store import Store
    from tests.fixtures import synth

    block = next(b for t, b in _blocks(_readme(), AFTER_RUN) if t)
    script = (ROOT / "scripts" / "run-embedded.sh").read_text()
    printed = [x.strip() for x in script.splitlines() if x.startswith("  .venv/bin/") or x.startswith("  make ")]
    assert [x.split("#")[0].strip() for x in block] == [x.split("#")[0].strip() for x in printed]
    synth.seed_store(Store.from_url(f"file://{tmp_path / 'store'}"), synth.nightly_results(2, trials=2),
                     str(tmp_path / "runs"))
    env = _new_shell_env(tmp_path)
    ran = 0
    for line in block:
        if line.startswith("make serve"):  # a service: its own tests (tests/integration/test_serve.py)
            continue
        p = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"README line failed ({p.returncode}): {line}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
        assert "mxnet-bert" in p.stdout, p.stdout
        ran += 1
    assert ran == 2


def test_the_tested_blocks_name_the_venv_and_make_shell_puts_dlperf_on_the_path(tmp_path):
    """A new shell has no ``dlperf``: the tested blocks call ``.venv/bin/dlperf``; ``make shell``
    (what the README offers for typing plain ``dlperf``) opens a shell where it is on the PATH."""
    for mark in (MARK, AFTER_RUN):
        for line in next(b for t, b in _blocks(_readme(), mark) if t):
            assert not re.match(r"^([A-Z_]+=\S+ )*dlperf ", line), line
    env = _new_shell_env(tmp_path)
    # -o install: the venv as it is (a unit test never reinstalls)
    p = subprocess.run(["make", "-s", "-o", "install", "shell"], cwd=ROOT, env=env, input="command -v dlperf\nexit\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and str(ROOT / ".venv" / "bin" / "dlperf") in p.stdout, p.stdout + p.stderr
