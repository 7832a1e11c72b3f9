"""A refused trigger changes nothing: Airflow's trigger form, with "Unpause on trigger" ticked,
sends ``PATCH /api/v2/dags/<dag> {"is_paused": false}`` beside the trigger without waiting for
the trigger's answer. The api-server middleware (dlperf_tasks/airflow/conf_guard.py) pauses the
DAG again, through the app and with the caller's credentials, when the trigger is refused (by
the guard or by Airflow's own schema check), whichever request arrives first; an unpause with
no refused trigger beside it, and a refusal with no unpause, change nothing. The real UI in
Chromium: tests/integration/test_dag_rest_trigger.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from dlperf_tasks.airflow import conf_guard
from dlperf_tasks.airflow.conf_guard import ConfGuard

AUTH = (b"authorization", b"Bearer t0ken")


class FakeAirflow:
    """An ASGI app standing in for the api-server: a paused flag per DAG, every request seen;
    a trigger whose logical date is not a date is refused with 422, as Airflow's body check does."""

    def __init__(self):
        self.paused = {"dlperf_smoke": True}
        self.seen: list[tuple[str, str, dict, bytes]] = []

    async def __call__(self, scope, receive, send):
        body, more = b"", True
        while more:
            msg = await receive()
            body, more = body + msg.get("body", b""), msg.get("more_body", False)
        self.seen.append((scope["method"], scope["path"], dict(scope["headers"]), body))
        status = 200
        if scope["method"] == "PATCH":
            self.paused[scope["path"].rsplit("/", 1)[1]] = json.loads(body)["is_paused"]
        elif json.loads(body).get("logical_date") == "not a date":
            status = 422
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def call(app, method: str, path: str, doc: dict) -> int:
    incoming = [{"type": "http.request", "body": json.dumps(doc).encode(), "more_body": False}]
    sent: list = []

    async def receive():
        return incoming.pop(0)

    async def send(msg):
        sent.append(msg)

    asyncio.run(app({"type": "http", "method": method, "path": path, "headers": [AUTH]}, receive, send))
    return sent[0]["status"]


UNPAUSE = ("PATCH", "/api/v2/dags/dlperf_smoke", {"is_paused": False})
REFUSED_BY_AIRFLOW = ("POST", "/api/v2/dags/dlperf_smoke/dagRuns",
                      {"logical_date": "not a date", "conf": {"trials": 1, "topologies": ["1n1g"]}})
REFUSED_BY_GUARD = ("POST", "/api/v2/dags/dlperf_smoke/dagRuns", {"conf": {"trails": 1}})
ACCEPTED = ("POST", "/api/v2/dags/dlperf_smoke/dagRuns", {"conf": {"trials": 1, "topologies": ["1n1g"]}})


@pytest.mark.parametrize("order", ["unpause first", "trigger first"])
@pytest.mark.parametrize("trigger", [REFUSED_BY_AIRFLOW, REFUSED_BY_GUARD], ids=["airflow", "guard"])
def test_a_refused_trigger_leaves_the_dag_paused(monkeypatch, order, trigger):
    monkeypatch.setenv("AIRFLOW__DLPERF__CLUSTER", "local")
    app = FakeAirflow()
    guard = ConfGuard(app)
    first, second = (UNPAUSE, trigger) if order == "unpause first" else (trigger, UNPAUSE)
    assert call(guard, *first) in (200, 400, 422) and call(guard, *second) in (200, 400, 422)
    assert app.paused["dlperf_smoke"] is True
    method, path, headers, body = app.seen[-1]  # the re-pause: through the app, as the same caller
    assert (method, path, json.loads(body)) == ("PATCH", "/api/v2/dags/dlperf_smoke", {"is_paused": True})
    assert headers[b"authorization"] == b"Bearer t0ken"


def repauses(app) -> int:
    return sum(1 for m, _, _, body in app.seen if m == "PATCH" and json.loads(body) == {"is_paused": True})


def test_an_accepted_trigger_or_a_lone_unpause_or_a_late_refusal_changes_nothing(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DLPERF__CLUSTER", "local")
    app = FakeAirflow()
    guard = ConfGuard(app)
    assert call(guard, *UNPAUSE) == 200 and call(guard, *ACCEPTED) == 200
    assert app.paused["dlperf_smoke"] is False and repauses(app) == 0
    # a refusal long after the unpause (another submit, not the form's pair) leaves it unpaused
    guard.unpaused["dlperf_smoke"] -= conf_guard.PAIR_S + 1
    assert call(guard, *REFUSED_BY_GUARD) == 400
    assert app.paused["dlperf_smoke"] is False and repauses(app) == 0
    # a refusal with no unpause beside it: no request added
    guard.refused.clear()
    seen = len(app.seen)
    assert call(guard, *REFUSED_BY_GUARD) == 400 and len(app.seen) == seen
