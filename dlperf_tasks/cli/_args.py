"""argparse value types shared by the sub-commands."""

from __future__ import annotations

import argparse


def int_at_least(minimum: int):
    """An argparse ``type`` accepting integers >= ``minimum``; the message names the bad value."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = "positive integer" if minimum == 1 else f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
