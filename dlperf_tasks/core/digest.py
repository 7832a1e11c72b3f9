"""SHA-256 and SHA-1 without ``hashlib``'s start-up (issue 28: start-up of ``dlperf extract``).

``import hashlib`` initialises OpenSSL (~4 ms, a tenth of the command's fixed cost); CPython's
own modules (``_sha1``; ``_sha256`` up to 3.11, ``_sha2`` from 3.12: what hashlib itself falls
back to) compute the same digests without it. Where neither exists, hashlib's is used. The digests are
the algorithms', whichever computes them (a unit test compares them).
"""

from __future__ import annotations


_MAKERS: dict = {}


def _sha256():
    try:
        from _sha256 import sha256  # CPython <= 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # CPython >= 3.12
        except ImportError:
            from hashlib import sha256
    return sha256


def _sha1():
    try:
        from _sha1 import sha1
    except ImportError:
        from hashlib import sha1
    return sha1


def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 digest of ``data``."""
    make = _MAKERS.get("sha256") or _MAKERS.setdefault("sha256", _sha256())
    return make(data).hexdigest()


def sha1_hex(data: bytes) -> str:
    """The hex SHA-1 digest of ``data`` (a short stable name, not a security use)."""
    make = _MAKERS.get("sha1") or _MAKERS.setdefault("sha1", _sha1())
    return make(data).hexdigest()
