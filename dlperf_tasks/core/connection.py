"""A connection's ``extra`` (Airflow's connection model as a plain dict: SSH nodes, inventories
from connections, the S3 store's credentials). No Airflow import."""

from __future__ import annotations

import json
from typing import Any, Mapping

from dlperf_tasks.core.errors import RemoteError


def connection_extra(conn: Mapping[str, Any], conn_id: str | None = None,
                     error: type[Exception] = RemoteError) -> dict[str, Any]:
    """A connection's ``extra`` as a new dict: the mapping itself or its JSON text (empty: {}).
    The one reader of ``extra`` (SSH nodes, inventories from connections, the S3 store); raises
    the caller's ``error`` class naming the connection, never echoing the (secret) text."""
    conn_id = conn_id or conn.get("conn_id") or "?"
    raw = conn.get("extra") or {}
    if isinstance(raw, (str, bytes)):
        try:
            raw = json.loads(raw or "{}")
        except ValueError:
            raise error(f"connection {conn_id}: extra is not valid JSON") from None
    if not isinstance(raw, Mapping):
        raise error(f"connection {conn_id}: extra must be a JSON object (a mapping), not {type(raw).__name__}")
    return dict(raw)
