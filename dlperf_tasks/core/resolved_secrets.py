"""The one registry of secrets this process resolved, for the pre-publish leak check.

Every place that turns a reference into a secret value registers it here: an inventory node's
password, private key text and passphrase (YAML, ``*_env`` variables, connections), the
registry password (``password_env``, the env file, a connection), a store connection's secret
key and session token, and the secret-looking fields of any connection that was read. The
leak scanner (``store/leakscan.py``) refuses to publish any object that contains one of them,
as it does for the secret-looking variables of the environment.

Values are kept in memory only, never printed. A private key's text is registered line by line
(the body lines), since a log can only hold it a line at a time.

    from dlperf_tasks.core import resolved_secrets
    resolved_secrets.remember(node.password)
    resolved_secrets.values()   # every registered value, longest first
"""

from __future__ import annotations

import json
import threading
from typing import Any, Mapping

MIN_LENGTH = 6  # shorter values match ordinary text too often to be refused on sight
# words that are not secrets even when written in a password field (placeholders, defaults)
_NOT_SECRET = frozenset({"password", "passwd", "changeme", "secret", "required", "optional", "none", "null",
                         "example", "default"})
# connection fields (``extra`` keys) whose values are secrets
_SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "token", "private_key", "api_key", "apikey",
                 "access_key", "credential", "session")
_POINTER_SUFFIXES = ("_env", "_file", "_path", "_id")

_lock = threading.Lock()
_values: set[str] = set()


def _pieces(value: str) -> list[str]:
    """``value`` itself, or the body lines of a multi-line secret (a PEM/OpenSSH key)."""
    v = value.strip()
    if "\n" not in v:
        return [v]
    return [line.strip() for line in v.splitlines() if line.strip() and not line.strip().startswith("-----")]


def pieces(text: str) -> list[str]:
    """The pieces of one secret value that a leak check looks for (too-short values and
    placeholder words are none)."""
    return [p for p in _pieces(text) if len(p) >= MIN_LENGTH and p.lower() not in _NOT_SECRET]


def remember(*values: Any) -> None:
    """Register resolved secret values (None, empty and too-short values are ignored)."""
    found = []
    for value in values:
        if value is None or not isinstance(value, (str, bytes)):
            continue
        found += pieces(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    if found:
        with _lock:
            _values.update(found)


def is_secret_field(name: str) -> bool:
    """A connection/extra field that holds a secret (``password``, ``aws_secret_access_key``,
    ``private_key``...), not one that only names where it is (``password_env``, ``key_file``)."""
    low = str(name).lower()
    return any(w in low for w in _SECRET_WORDS) and not low.endswith(_POINTER_SUFFIXES)


def remember_connection(conn: Mapping[str, Any] | Any) -> None:
    """Register a connection's password and the secret fields of its ``extra`` (a mapping or
    its JSON text; an unreadable extra is skipped: its reader reports it)."""
    if isinstance(conn, Mapping):
        password, extra = conn.get("password"), conn.get("extra")
    else:  # a connection object: its parsed extra when it has one
        password = getattr(conn, "password", None)
        extra = getattr(conn, "extra_dejson", None) or getattr(conn, "extra", None)
    remember(password)
    if isinstance(extra, (str, bytes)):
        try:
            extra = json.loads(extra or "{}")
        except ValueError:
            return
    if isinstance(extra, Mapping):
        remember(*(v for k, v in extra.items() if is_secret_field(k)))


def values() -> list[str]:
    """Every registered secret, longest first."""
    with _lock:
        return sorted(_values, key=len, reverse=True)


def forget_all() -> None:
    """Empty the registry (tests)."""
    with _lock:
        _values.clear()
