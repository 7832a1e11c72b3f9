"""Refuse a bad run conf when the run is triggered, not a minute later in the plan task.

Airflow 3 validates a trigger's ``conf`` against the DAG's ``Param`` schemas one field at a
time; a field the DAG does not declare (``{"trails": 1}``) becomes a new, schema-less param and
is accepted (``SerializedParamsDict.deep_merge``), and nothing there can see the cluster. This
ASGI middleware (registered by ``plugins/dlperf_conf_guard.py`` as a ``fastapi_root_middlewares``
entry of the api-server) looks at ``POST /api/v2/dags/dlperf_<group>/dagRuns`` (the REST API and
the UI's trigger form both use it) and answers HTTP 400 with the plan task's own error
(:func:`dlperf_tasks.airflow.params.precheck`: unknown fields, bad values, plans too large,
topologies the cluster cannot hold) before a run exists. Everything else passes untouched; a
body it cannot read is left to Airflow. The plan task still checks again (CLI triggers,
``dag.test()``, other api-servers).
"""

from __future__ import annotations

import json
import logging
import re

import anyio

_PATH = re.compile(r"^/api/v2/dags/dlperf_([A-Za-z0-9_.-]+)/dagRuns/?$")
MAX_BODY = 1 << 20
_log = logging.getLogger("dlperf.conf_guard")


def refusal(group: str, body: bytes) -> str | None:
    """The error for a trigger body of DAG ``dlperf_<group>``, or None to let it through."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return None
    conf = doc.get("conf") if isinstance(doc, dict) else None
    if not isinstance(conf, dict):
        return None
    from dlperf_tasks.airflow import params
    from dlperf_tasks.airflow import settings as settings_mod

    try:
        return params.precheck(group, conf, settings_mod.load())
    except Exception as exc:  # noqa: BLE001 - the guard must never break triggering; the plan task checks again
        _log.warning("conf precheck of dlperf_%s skipped: %s: %s", group, type(exc).__name__, exc)
        return None


class ConfGuard:
    """Pure ASGI middleware (the body is read once and replayed to the app)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        m = _PATH.match(scope.get("path") or "") if scope.get("type") == "http" else None
        if m is None or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        messages, body, more = [], b"", True
        while more and len(body) <= MAX_BODY:
            msg = await receive()
            messages.append(msg)
            if msg["type"] != "http.request":
                break
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        # catalog and plan work off the event loop (other requests keep being served meanwhile)
        error = await anyio.to_thread.run_sync(refusal, m.group(1), body) if not more else None
        if error is not None:
            payload = json.dumps({"detail": error}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
            return None

        async def replay():
            return messages.pop(0) if messages else await receive()

        return await self.app(scope, replay, send)
