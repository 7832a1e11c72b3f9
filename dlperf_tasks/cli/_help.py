"""The help formatter of the parsers on ``dlperf extract``'s path: argparse's
``RawDescriptionHelpFormatter`` given the width it would find itself, without importing
:mod:`shutil` for it (argparse builds a formatter on every ``add_argument`` to check the metavar,
and shutil's import pulls bz2, lzma and zlib: ~2.5 ms of the command's start-up).

The width is the one ``shutil.get_terminal_size`` reports (``$COLUMNS`` when it is a positive
integer, else the terminal of ``sys.__stdout__``, else 80) less 2, as argparse computes it;
tests/unit/test_extract_startup.py checks it against shutil's.
"""

from __future__ import annotations

import argparse
import os
import sys


def terminal_columns() -> int:
    """The columns ``shutil.get_terminal_size()`` reports (fallback 80)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 80
        columns = columns or 80
    return columns


class RawDescription(argparse.RawDescriptionHelpFormatter):
    """``argparse.RawDescriptionHelpFormatter`` with the same default width, found without shutil."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        if width is None:
            width = terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)
