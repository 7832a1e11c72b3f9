"""Every ``dlperf`` sub-command's ``--help`` has an examples section (``results *``,
``confirm`` and ``cluster *`` had none although the README said every command has), and every
example parses with that command's own parser (an example with a wrong flag fails here)."""

from __future__ import annotations

import shlex

import pytest

from dlperf_tasks.cli import build_parser
from dlperf_tasks.cli.examples import sub_parsers


def _helps():
    return [(" ".join(path), p) for path, p in sub_parsers(build_parser())]


def test_every_sub_command_help_has_examples():
    missing = [name or "dlperf" for name, p in _helps() if "examples:" not in p.format_help()]
    assert not missing, f"--help without an examples section: {missing}"
    names = {name for name, _ in _helps()}
    assert {"results show", "results check", "results export", "cluster check", "cluster clear", "confirm"} <= names


def _examples(help_text: str) -> list[str]:
    block = help_text.split("examples:", 1)[1].replace("\\\n", " ")  # continued lines joined
    out = []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("dlperf "):
            cmd = line.split("   ")[0].split(" > ")[0].split(" (")[0].strip()  # drop the explanation
            out.append(cmd)
    return out


@pytest.mark.parametrize("name", [n for n, _ in _helps()])
def test_every_example_parses(name, capsys):
    parser = build_parser()
    p = dict(_helps())[name]
    examples = _examples(p.format_help())
    assert examples, name
    for ex in examples:
        argv = shlex.split(ex)[1:]
        try:
            parser.parse_args(argv)
        except SystemExit as exc:  # argparse refused the example
            pytest.fail(f"{name}: example {ex!r} does not parse: {capsys.readouterr().err.strip()} ({exc})")
