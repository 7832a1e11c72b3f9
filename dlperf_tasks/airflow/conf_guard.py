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

A refused trigger changes nothing: the UI's trigger form, with "Unpause on trigger" ticked,
sends its own ``PATCH /api/v2/dags/<dag> {"is_paused": false}`` beside the trigger without
waiting for the trigger's answer. When a trigger of a dlperf DAG is refused (by this guard or
by Airflow, any 4xx) within :data:`PAIR_S` seconds of such an unpause (before or after it),
the DAG is paused again, through the same API and with the same caller's credentials.
"""

from __future__ import annotations

import json
import logging
import re
import time

import anyio

_PATH = re.compile(r"^/api/v2/dags/dlperf_([A-Za-z0-9_.-]+)/dagRuns/?$")
_DAG_PATH = re.compile(r"^/api/v2/dags/(dlperf_[A-Za-z0-9_.-]+)/?$")
MAX_BODY = 1 << 20
PAIR_S = 10.0  # an unpause and a refused trigger this close together come from one form submit
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
        self.unpaused: dict[str, float] = {}  # dag id -> when an unpause of it last passed
        self.refused: dict[str, float] = {}  # dag id -> when a trigger of it was last refused

    async def __call__(self, scope, receive, send):
        path = scope.get("path") or "" if scope.get("type") == "http" else ""
        d = _DAG_PATH.match(path)
        if d is not None and scope.get("method") == "PATCH":
            return await self._patch(d.group(1), scope, receive, send)
        m = _PATH.match(path)
        if m is None or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        messages, body, more = await _read(receive)
        dag_id = f"dlperf_{m.group(1)}"
        # catalog and plan work off the event loop (other requests keep being served meanwhile)
        error = await anyio.to_thread.run_sync(refusal, m.group(1), body) if not more else None
        if error is not None:
            payload = json.dumps({"detail": error}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
            await self._refused(dag_id, scope)
            return None

        status = await self._forward(scope, messages, receive, send)
        if status is not None and 400 <= status < 500:  # Airflow's own refusal (a param's schema)
            await self._refused(dag_id, scope)
        return None

    async def _forward(self, scope, messages: list, receive, send) -> int | None:
        """Pass the request (its ``messages`` already read) to the app; the status it answered."""
        status = []

        async def replay():
            return messages.pop(0) if messages else await receive()

        async def watch(msg):
            if msg["type"] == "http.response.start":
                status.append(msg["status"])
            await send(msg)

        await self.app(scope, replay, watch)
        return status[0] if status else None

    async def _patch(self, dag_id: str, scope, receive, send):
        messages, body, _ = await _read(receive)
        if await self._forward(scope, messages, receive, send) == 200 and _unpauses(body):
            now = time.monotonic()
            self.unpaused[dag_id] = now
            if now - self.refused.get(dag_id, -PAIR_S) < PAIR_S:  # the trigger's answer came first
                await self._pause(dag_id, scope)

    async def _refused(self, dag_id: str, scope) -> None:
        now = time.monotonic()
        self.refused[dag_id] = now
        if now - self.unpaused.get(dag_id, -PAIR_S) < PAIR_S:
            await self._pause(dag_id, scope)

    async def _pause(self, dag_id: str, scope) -> None:
        """Pause ``dag_id`` again through the app itself, as the caller of ``scope``."""
        self.unpaused.pop(dag_id, None)
        self.refused.pop(dag_id, None)
        body = b'{"is_paused": true}'
        headers = [(k, v) for k, v in scope.get("headers") or [] if k not in (b"content-length", b"content-type")]
        sub = {**scope, "method": "PATCH", "path": f"/api/v2/dags/{dag_id}",
               "raw_path": f"/api/v2/dags/{dag_id}".encode(), "query_string": b"",
               "headers": [*headers, (b"content-type", b"application/json"),
                           (b"content-length", str(len(body)).encode())]}
        sent = [{"type": "http.request", "body": body, "more_body": False}]
        status = []

        async def receive():
            return sent.pop(0) if sent else {"type": "http.disconnect"}

        async def send(msg):
            if msg["type"] == "http.response.start":
                status.append(msg["status"])

        await self.app(sub, receive, send)
        if status != [200]:
            _log.warning("%s: re-pausing after a refused trigger answered %s", dag_id, status)


async def _read(receive):
    """The request's messages and body (at most MAX_BODY bytes read); ``more`` when cut short."""
    messages, body, more = [], b"", True
    while more and len(body) <= MAX_BODY:
        msg = await receive()
        messages.append(msg)
        if msg["type"] != "http.request":
            break
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    return messages, body, more


def _unpauses(body: bytes) -> bool:
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("is_paused") is False
