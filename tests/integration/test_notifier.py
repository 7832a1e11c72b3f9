"""Findings and failures through Airflow's notifier interface.

- a real ``dag.test()`` whose task fails calls :class:`DlperfWebhookNotifier` as its
  ``on_failure_callback``: the webhook (a real HTTP server) receives the failure with the
  DAG, run, task, error and the task's log link;
- :func:`notify_findings` feeds the same findings to the webhook notifier and to Airflow's
  SMTP provider notifier (``SmtpNotifier`` with templates ``{{ dlperf_subject }}`` /
  ``{{ dlperf_message }}``), delivered to a real SMTP listener on 127.0.0.1; a notifier that
  fails is skipped, the others still send.
"""

import email
import json
import socketserver
from pathlib import Path
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

pytestmark = [pytest.mark.airflow]
ROOT = Path(__file__).resolve().parents[2]

RECEIVED: list = []


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        RECEIVED.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


class _Smtp(socketserver.StreamRequestHandler):
    """Just enough SMTP to take one message (no TLS, no auth)."""

    mails: list = []

    def handle(self):
        self.wfile.write(b"220 test ESMTP\r\n")
        data = None
        while True:
            line = self.rfile.readline()
            if not line:
                return
            cmd = line.decode(errors="replace").strip().upper()
            if data is not None:
                if line in (b".\r\n", b".\n"):
                    _Smtp.mails.append(b"".join(data).decode(errors="replace"))
                    data = None
                    self.wfile.write(b"250 queued\r\n")
                else:
                    data.append(line)
                continue
            if cmd.startswith(("EHLO", "HELO")):
                self.wfile.write(b"250 test\r\n")
            elif cmd == "DATA":
                data = []
                self.wfile.write(b"354 go on\r\n")
            elif cmd == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


@pytest.fixture
def hook_url():
    srv = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    RECEIVED.clear()
    yield f"http://127.0.0.1:{srv.server_port}/hook?token=SECRET"
    srv.shutdown()


@pytest.fixture
def smtp_port(monkeypatch):
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Smtp.mails.clear()
    conn = {"conn_type": "smtp", "host": "127.0.0.1", "port": srv.server_address[1],
            "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "dlperf@example.test"}}
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", json.dumps(conn))
    yield srv.server_address[1]
    srv.shutdown()


PROBE_DAG = """
import datetime as dt, sys
from airflow.sdk import DAG, task
from dlperf_tasks.airflow.notifier import DlperfWebhookNotifier

notifier = DlperfWebhookNotifier(target=sys.argv[1] if len(sys.argv) > 1 else "", base_url="http://af.example:8080")
with DAG("h6_notifier_probe", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
         default_args={"on_failure_callback": notifier, "retries": 0}) as dag:

    @task(task_id="boom")
    def boom():
        raise ValueError("planted failure 42")

    boom()

if __name__ == "__main__":
    dag.test()
"""


def test_failed_task_reaches_the_webhook_through_on_failure_callback(airflow_db, hook_url, tmp_path):
    """A real dag.test() (its own DAG bundle in a temp dir) whose task fails."""
    import os
    import subprocess
    import sys

    (tmp_path / "probe_dag.py").write_text(PROBE_DAG)
    bundles = [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {}},
               {"name": "h6probe", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(tmp_path), "refresh_interval": 0}}]
    env = dict(os.environ, AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST=json.dumps(bundles))
    r = subprocess.run([sys.executable, str(tmp_path / "probe_dag.py"), hook_url], env=env, capture_output=True,
                       text=True, timeout=300)
    assert RECEIVED, f"the webhook got nothing:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    msg = RECEIVED[-1]
    assert msg["kind"] == "failure" and msg["dag_id"] == "h6_notifier_probe" and msg["task_id"] == "boom"
    assert "planted failure 42" in msg["error"]
    assert msg["url"].startswith("http://af.example:8080/dags/h6_notifier_probe/runs/") and msg["url"].endswith("/tasks/boom")


def test_findings_reach_webhook_and_smtp_provider_notifier(airflow_db, hook_url, smtp_port):
    from airflow.providers.smtp.notifications.smtp import SmtpNotifier

    from dlperf_tasks.airflow.notifier import DlperfWebhookNotifier, notify_findings

    report = {"run_id": "r-31", "suite": "mxnet-bert", "findings": [
        {"kind": "scaling", "cell_id": "mxnet-bert/bz32/fp32/4n8g", "baseline": 23.85, "current": 22.43,
         "unit": "x", "delta_pct": -5.97, "ci_pct": [-8.1, -3.7], "env_diff": {"nccl": {"baseline": "2.18.5",
                                                                                           "current": "2.19.3"}}}]}

    class Broken(DlperfWebhookNotifier):
        def notify(self, context):
            raise RuntimeError("down")

    smtp = SmtpNotifier(from_email="dlperf@example.test", to="team@example.test", subject="{{ dlperf_subject }}",
                        html_content="<pre>{{ dlperf_message }}</pre>")
    url = "http://af.example:8080/dlperf/runs/r-31"
    sent = notify_findings({}, report, url, [Broken(target=hook_url), DlperfWebhookNotifier(target=hook_url), smtp])
    assert sent == 2
    assert RECEIVED[-1]["kind"] == "findings" and RECEIVED[-1]["url"] == url
    assert "95% interval [-8.10, -3.70]%" in RECEIVED[-1]["text"] and "nccl 2.18.5 -> 2.19.3" in RECEIVED[-1]["text"]
    assert len(_Smtp.mails) == 1
    mail = _Smtp.mails[0]
    assert "dlperf: 1 regression(s) in mxnet-bert run r-31" in mail and "team@example.test" in mail
    assert notify_findings({}, {"run_id": "x", "findings": []}, url, [smtp]) == 0  # nothing to say


def _smoke_history(store, workdir, n: int = 10, speed: float = 1.0e5) -> list[str]:
    """``n`` older published runs of the smoke suite's 1n1g cell at ``speed`` samples/s (far
    above what the tiny CPU model does), so the DAG run's check finds a throughput drop."""
    import datetime as dt
    import random

    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.model import MetricKind, Trial, TrialMetric, TrialResult, TrialStatus
    from dlperf_tasks.catalog.plan import Overrides, plan
    from dlperf_tasks.report.result_json import build_result
    from dlperf_tasks.measure.stats import aggregate
    from tests.fixtures.synth import seed_store

    cell = plan(load_suite("smoke"), Overrides.from_dict({"topologies": ["1n1g"]})).trials[0].trial.cell
    rng, out = random.Random(3), []
    for night in range(n):
        started = dt.datetime(2026, 1, 1 + night, 1, tzinfo=dt.timezone.utc)
        trials = [TrialResult(trial=Trial(cell, i), status=TrialStatus.OK, nodes=["local0"],
                              metric=TrialMetric(value=speed * rng.gauss(1.0, 0.01), kind=MetricKind.THROUGHPUT))
                  for i in range(1, 4)]
        out.append(build_result(aggregate(trials), {
            "run_id": f"smoke-202601{night + 1:02d}T010000-{night:06d}", "suite": "smoke", "framework": "smoke_bert",
            "started_at": started.isoformat(), "finished_at": (started + dt.timedelta(minutes=5)).isoformat(),
            "image": None, "env": {}}))
    return seed_store(store, out, str(workdir))


def test_dag_run_findings_reach_each_configured_notifier_once(airflow_db, hook_url, smtp_port, monkeypatch,
                                                              tmp_path):
    """A real dlperf_smoke run (dag.test(), real training) against a seeded history: its
    regression finding reaches the webhook (one POST: the check no longer posts by itself)
    and the SMTP provider notifier named in ``[dlperf] notifiers``; the run's failure
    callback is the same notifier list."""
    from airflow.dag_processing.dagbag import DagBag

    from dlperf_tasks.airflow.notifier import DlperfNotifiers
    from dlperf_tasks.store import Store

    store_dir = tmp_path / "store"  # this test's own store: its history must not reach other tests
    _smoke_history(Store.from_url(f"file://{store_dir}"), tmp_path / "seed")
    smtp = {"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
            "kwargs": {"from_email": "dlperf@example.test", "to": "team@example.test",
                       "subject": "{{ dlperf_subject }}", "html_content": "<pre>{{ dlperf_message }}</pre>"}}
    monkeypatch.setenv("AIRFLOW__DLPERF__STORE_URL", f"file://{store_dir}")
    monkeypatch.setenv("AIRFLOW__DLPERF__NOTIFY_URL", hook_url)
    monkeypatch.setenv("AIRFLOW__DLPERF__NOTIFIERS", json.dumps([smtp]))
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://af.example:8080")
    monkeypatch.delenv("DLPERF_NOTIFY_URL", raising=False)
    monkeypatch.delenv("DLPERF_STORE_URL", raising=False)
    monkeypatch.delenv("DLPERF_NOTIFY_ON", raising=False)
    bag = DagBag(dag_folder=str(ROOT / "dags" / "dlperf_smoke.py"))
    dag = bag.dags["dlperf_smoke"]
    (callback,) = dag.default_args["on_failure_callback"]
    assert isinstance(callback, DlperfNotifiers) and [repr(f) for f in callback.factories] == [
        f"webhook http://127.0.0.1:{hook_url.split(':')[2].split('/')[0]}/...", smtp["class"]]

    # 3 trials: with 2 the rank test against 30 history values cannot reach alpha = 0.01
    conf = {"trials": 3, "warmup_iters": 2, "measure_iters": 6, "topologies": ["1n1g"]}
    dr = dag.test(run_conf=conf)
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    findings = [m for m in RECEIVED if m.get("kind") == "findings"]
    assert len(findings) == 1, RECEIVED  # once: through the notifier, not also by the check itself
    msg = findings[0]
    assert msg["report"]["suite"] == "smoke" and msg["report"]["findings"][0]["kind"] == "throughput"
    assert msg["url"] == f"http://af.example:8080/dlperf/runs/{msg['report']['run_id']}"
    assert len(_Smtp.mails) == 1 and "dlperf: 1 regression(s) in smoke run" in _Smtp.mails[0]
    mail = email.message_from_string(_Smtp.mails[0])
    body = "".join(part.get_payload(decode=True).decode() for part in mail.walk() if not part.is_multipart())
    assert mail["To"] == "team@example.test" and msg["url"] in body and "throughput smoke/bz8/fp32/1n1g" in body

    # notify only on A/B-confirmed findings: the DAG's check sends nothing
    RECEIVED.clear()
    _Smtp.mails.clear()
    monkeypatch.setenv("DLPERF_NOTIFY_ON", "confirmed")
    dr = dag.test(run_conf=conf)
    assert str(getattr(dr.state, "value", dr.state)) == "success"
    assert RECEIVED == [] and _Smtp.mails == []


class ProbeNotifier:  # not a BaseNotifier: refused by name
    pass


def test_notifier_list_accepts_any_base_notifier_and_names_bad_entries():
    """``[dlperf] notifiers``: import paths with kwargs; a class, a module-level instance or a
    factory, each built afresh per message; anything that is not a BaseNotifier is named."""
    from dlperf_tasks.airflow.notifier import DlperfNotifiers, configured, default_notifiers
    from dlperf_tasks.history.notify import NotifyError, parse_notifier_specs

    smtp = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"
    assert parse_notifier_specs("") == []
    assert parse_notifier_specs(f"{smtp}, pkg.mod:Thing") == [(smtp, {}), ("pkg.mod:Thing", {})]
    spec = json.dumps([{"class": smtp, "kwargs": {"to": "a@b.test", "subject": "{{ dlperf_subject }}"}}])
    assert parse_notifier_specs(spec) == [(smtp, {"to": "a@b.test", "subject": "{{ dlperf_subject }}"})]
    for bad, words in [("[1]", "notifiers[0]"), ("[{\"class\": \"x.Y\", \"extra\": 1}]", "notifiers[0]"),
                       ("os.system; rm", "not an import path"), ("[", "not valid JSON"), ("Name", "import path")]:
        with pytest.raises(NotifyError, match=words.replace("[", r"\[").replace("]", r"\]")):
            parse_notifier_specs(bad)
    (make,) = configured("", spec)
    a, b = make(), make()
    assert type(a).__name__ == "SmtpNotifier" and a is not b and a.subject == "{{ dlperf_subject }}"
    (bad,) = configured("", "tests.integration.test_notifier.ProbeNotifier")
    with pytest.raises(NotifyError, match="not a BaseNotifier"):
        bad()
    assert default_notifiers("", "") == []
    (fan,) = default_notifiers("http://127.0.0.1:9/hook", spec)
    assert isinstance(fan, DlperfNotifiers) and len(fan.factories) == 2
