"""``dlperf`` command line. Each sub-command lives in its own module exposing
``register(subparsers)``; the module sets ``func`` on its parser. Sub-commands that belong to
another layer live in that layer's package as ``dlperf_tasks/<package>/cli_<name>.py`` (e.g. the
scheduler layer's ``serve``) and are found there, so this package names no other layer.

Errors derived from DlperfError are printed as ``dlperf: error: <message>`` with exit 2. Every
line a command prints goes through :func:`dlperf_tasks.cli._term.escape` (no control sequence
from a log, a result or a file name reaches the terminal).
"""

from __future__ import annotations

import argparse
import gc
import sys
from importlib import import_module
from pathlib import Path

from dlperf_tasks import __version__
from dlperf_tasks.cli._term import escaped_output
from dlperf_tasks.cli.examples import add_examples
from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.frameworks import _native

COMMANDS = ["catalog", "plan", "extract", "sweep", "publish", "results", "cluster", "confirm"]


def layer_commands() -> list[str]:
    """Module names of the sub-commands other packages add (``dlperf_tasks/<pkg>/cli_<name>.py``)."""
    root = Path(__file__).resolve().parents[1]
    return sorted(f"dlperf_tasks.{p.parent.name}.{p.stem}" for p in root.glob("*/cli_*.py"))


def _modules(only: str | None = None) -> list[str]:
    """The sub-command modules to register: all of them, or just ``only``'s (a command run imports
    only what it uses: ``dlperf extract`` never loads the sweep, store or results code)."""
    if only in COMMANDS:  # a built-in command: no need to look for the layers' commands
        return [f"dlperf_tasks.cli.{only}"]
    layer = layer_commands()
    if only is not None:
        mine = [m for m in layer if m.rsplit(".", 1)[1] == f"cli_{only}"]
        if mine:
            return mine
    return [f"dlperf_tasks.cli.{name}" for name in COMMANDS] + layer


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``dlperf`` parser; ``only``: register just that sub-command (when it names one)."""
    parser = argparse.ArgumentParser(
        prog="dlperf",
        description=(
            "Benchmark deep-learning training on GPU clusters the DLPerf way: plan sweeps "
            "(1n1g..4n8g x batch sizes x precisions x trials), run them over SSH/Docker, extract "
            "per-iteration speeds from framework logs, compute median/average/speedup, publish "
            "to S3/OSS and compare archived results."
        ),
        epilog="Run 'dlperf <command> --help' for the options of each command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dlperf {__version__}\n{_native.status()}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for module in _modules(only):
        try:
            mod = import_module(module)
        except ModuleNotFoundError as exc:  # a command whose module is not written yet
            if exc.name == module:
                continue
            raise
        mod.register(sub)
    add_examples(parser)  # every sub-command's --help shows examples
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; everything it prints (stdout and stderr, errors and argparse's messages
    included) has its control characters escaped (:mod:`dlperf_tasks.cli._term`)."""
    with escaped_output():
        return _main(argv)


#: the longest argument any command takes (a path, a comma list of nodes): longer ones are refused
#: before parsing, in one line (a 100 kB --catalog-dir used to end in a traceback)
MAX_ARG_CHARS = 64 * 1024


def _main(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    for i, arg in enumerate(words, 1):
        if len(arg) > MAX_ARG_CHARS:
            print(f"dlperf: error: argument {i} ({arg[:24]!r}...) is {len(arg)} characters long; "
                  f"at most {MAX_ARG_CHARS} are accepted", file=sys.stderr)
            return 2
    # the command word first (no top-level option before it): register only that command
    only = words[0] if words and not words[0].startswith("-") else None
    # a command is one short process that builds many objects and few cycles (imports, the parsers'
    # samples): collect rarely. The only gc setting in the package.
    gc.set_threshold(100_000, 50, 100)
    parser = build_parser(only)
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except DlperfError as exc:
        print(f"dlperf: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dlperf: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
