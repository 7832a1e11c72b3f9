"""How an engine step failed, so that each entry point can map it onto its own retry rules."""

from __future__ import annotations


class NonRetriable(Exception):
    """A failure that retrying cannot fix (bad params, a broken suite, policy fail_fast)."""


class Retriable(Exception):
    """A failure worth another try (node unreachable, launch failure, timeout, hang)."""
