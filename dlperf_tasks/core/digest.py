"""Hex SHA-256 and SHA-1 digests of bytes (hashlib's)."""

from __future__ import annotations

import hashlib


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha1_hex(data: bytes) -> str:
    """The hex SHA-1 digest of ``data`` (a short stable name, not a security use)."""
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()
