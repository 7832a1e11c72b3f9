"""argparse value types shared by the sub-commands: every number a user gives is bounded (a
value of 10**24, ``nan`` or ``inf`` is refused in one line that never echoes 100 kB)."""

from __future__ import annotations

import argparse
import math

#: the default ceiling of an integer option (counts, limits, retries, rounds)
MAX_INT = 1_000_000


def shown(text: str, limit: int = 40) -> str:
    """``repr(text)`` cut to ``limit`` characters (with the full length)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def int_at_least(minimum: int, maximum: int = MAX_INT):
    """An argparse ``type`` accepting integers from ``minimum`` to ``maximum``; the message
    names the bad value (cut short)."""

    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 32 else None
        except ValueError:
            value = None
        if value is None:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {shown(text)}")
        return value

    parse.__name__ = "positive integer" if minimum == 1 else f"integer >= {minimum}"
    return parse


def float_between(minimum: float, maximum: float):
    """An argparse ``type`` accepting finite numbers from ``minimum`` to ``maximum``."""

    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= 32 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be between {minimum:g} and {maximum:g}, got {shown(text)}")
        return value

    parse.__name__ = "number"
    return parse


def short_int(text: str) -> int:
    """An integer of at most 32 characters (argparse's own ``invalid int value`` otherwise; the
    range is checked by whoever reads it, e.g. :class:`dlperf_tasks.catalog.plan.Overrides`)."""
    if len(text) > 32:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer")
    return int(text)


short_int.__name__ = "int"
positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
port = int_at_least(1, 65535)
seconds = float_between(0.0, 30 * 86400.0)  # at most 30 days
fraction = float_between(0.0, 1.0)
percent = float_between(0.0, 1000.0)
