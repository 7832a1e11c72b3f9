"""dlperf findings and failures through Airflow's notifier interface (``BaseNotifier``).

Which notifiers (:func:`configured`):

- the custom webhook, :class:`DlperfWebhookNotifier`, when ``[dlperf] notify_url`` /
  ``DLPERF_NOTIFY_URL`` is set (``https://...`` POSTs JSON, ``python:module:function`` is called);
- every entry of ``[dlperf] notifiers`` (``AIRFLOW__DLPERF__NOTIFIERS``): any ``BaseNotifier``
  by import path, built with keyword arguments, e.g.::

      [dlperf]
      notifiers = [{"class": "airflow.providers.slack.notifications.slack.SlackNotifier",
                    "kwargs": {"slack_conn_id": "slack_dlperf", "channel": "#perf", "text": "{{ dlperf_message }}"}},
                   {"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
                    "kwargs": {"smtp_conn_id": "smtp_default", "to": "perf@example.com",
                               "subject": "{{ dlperf_subject }}", "html_content": "<pre>{{ dlperf_message }}</pre>"}},
                   {"class": "airflow.providers.apprise.notifications.apprise.AppriseNotifier",
                    "kwargs": {"apprise_conn_id": "apprise_default", "title": "{{ dlperf_subject }}",
                               "body": "{{ dlperf_message }}"}}]

  The entry may also name a module-level notifier instance or a function returning one. Each
  send builds fresh instances (``BaseNotifier`` renders its templates in place, once).

What they get: the task context plus ``dlperf_subject``, ``dlperf_message``, ``dlperf_url`` and
``dlperf_report`` (findings) / ``dlperf_failure`` (failures), so provider notifiers take them as
templates.

- failures: :func:`default_notifiers` is every DAG's ``on_failure_callback`` (one
  :class:`DlperfNotifiers` fanning out to the configured list);
- findings: the publish task passes :func:`findings_sender` to ``engine.finish.publish``; the
  regression check then sends nothing itself (nothing is sent twice) and the findings go to
  every configured notifier (:func:`notify_findings`). ``DLPERF_NOTIFY_ON=confirmed``: none.
  ``dlperf results check --notify`` and ``dlperf confirm`` (no Airflow) post to the webhook directly.

A failing notifier is logged and skipped: a broken webhook never fails a benchmark run. The
messages themselves are pure (:mod:`dlperf_tasks.history.notify`).
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Iterable, Mapping

from airflow.sdk import BaseNotifier

from dlperf_tasks.core.settings import env_value
from dlperf_tasks.history import notify as messages
from dlperf_tasks.history.links import results_url, task_url

_log = logging.getLogger("dlperf.notify")


def _base_url() -> str:
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or ""


def _spec_text() -> str:
    from airflow.configuration import conf

    return conf.get("dlperf", "notifiers", fallback="") or ""


def _failure(context: Mapping[str, Any], base_url: str | None) -> dict[str, Any]:
    dag = context.get("dag")
    dag_run, ti = context.get("dag_run"), context.get("ti") or context.get("task_instance")
    dag_id = getattr(dag, "dag_id", None) or getattr(dag_run, "dag_id", None) or "?"
    run_id = getattr(dag_run, "run_id", None) or context.get("run_id") or "?"
    task_id = getattr(ti, "task_id", None)
    error = str(context.get("exception") or context.get("reason") or "failed")
    base = base_url if base_url is not None else _base_url()
    log_url = task_url(base, dag_id, run_id, task_id) if task_id and base else None
    return messages.failure_message(dag_id, run_id, task_id, error, log_url)


class DlperfWebhookNotifier(BaseNotifier):
    """The dlperf webhook as an Airflow notifier. ``target``: URL or ``python:mod:fn``
    (default ``$DLPERF_NOTIFY_URL``); ``base_url``: links (default ``[api] base_url``)."""

    template_fields = ()

    def __init__(self, target: str | None = None, base_url: str | None = None, timeout: float = 10.0):
        super().__init__()
        self.target, self.base_url, self.timeout = target, base_url, timeout

    def message(self, context: Mapping[str, Any]) -> dict[str, Any]:
        if context.get("dlperf_report") is not None:
            return messages.findings_message(context["dlperf_report"], context.get("dlperf_url"))
        if context.get("dlperf_failure") is not None:
            return dict(context["dlperf_failure"])
        return _failure(context, self.base_url)

    def notify(self, context) -> None:
        target = self.target if self.target is not None else (env_value("notify_url") or "")
        messages.notify(self.message(context), target, always=True, timeout=self.timeout)


def _build(path: str, kwargs: Mapping[str, Any]) -> BaseNotifier:
    obj = messages.import_object(path)
    if isinstance(obj, BaseNotifier):
        if kwargs:
            raise messages.NotifyError(f"notifier {path!r} is an instance: it takes no kwargs")
        return copy.deepcopy(obj)
    made = obj(**kwargs) if callable(obj) else obj
    if not isinstance(made, BaseNotifier):
        raise messages.NotifyError(f"notifier {path!r} gave a {type(made).__name__}, not a BaseNotifier")
    return made


class _Factory:
    """Builds one configured notifier afresh for each message (named for the log)."""

    def __init__(self, name: str, make: Callable[[], BaseNotifier]):
        self.name, self.make = name, make

    def __call__(self) -> BaseNotifier:
        return self.make()

    def __repr__(self) -> str:
        return self.name


def configured(notify_url: str | None = None, spec: str | None = None) -> list[_Factory]:
    """Factories (one per notifier) of the webhook (``notify_url``, default the settings') and
    of ``[dlperf] notifiers`` (``spec``). The spec is checked now (a bad one raises
    :class:`~dlperf_tasks.history.notify.NotifyError`, so a DAG names it as its import error);
    classes are imported only when a message is sent."""
    if notify_url is None:
        from dlperf_tasks.airflow import settings as settings_mod

        notify_url = settings_mod.load().notify_url
    entries = messages.parse_notifier_specs(_spec_text() if spec is None else spec)
    out: list[Callable[[], BaseNotifier]] = []
    if (notify_url or "").strip():
        out.append(_Factory(f"webhook {messages.redact_target(notify_url)}",
                            lambda: DlperfWebhookNotifier(target=notify_url)))
    for path, kwargs in entries:
        out.append(_Factory(path, lambda p=path, k=kwargs: _build(p, k)))
    return out


def _fan_out(factories: Iterable[Callable[[], BaseNotifier]], ctx: dict[str, Any]) -> int:
    sent = 0
    for make in factories:
        try:
            n = make()
            n(ctx)
            sent += 1
        except Exception as exc:  # noqa: BLE001 - any notifier may fail; the run goes on
            _log.error("notifier %r failed: %s", make, exc)
    return sent


class DlperfNotifiers(BaseNotifier):
    """Every configured notifier as one ``on_failure_callback``: the failure message (DAG, run,
    task, error, log link) goes into the context as ``dlperf_subject``/``dlperf_message``."""

    template_fields = ()

    def __init__(self, factories: list[Callable[[], BaseNotifier]], base_url: str | None = None):
        super().__init__()
        self.factories, self.base_url = factories, base_url

    def notify(self, context) -> None:
        msg = _failure(context, self.base_url)
        ctx = dict(context, dlperf_subject=msg["subject"], dlperf_message=msg["text"], dlperf_url=msg["url"],
                   dlperf_failure=msg)
        _fan_out(self.factories, ctx)


def default_notifiers(notify_url: str | None = None, spec: str | None = None) -> list[BaseNotifier]:
    """The DAGs' ``on_failure_callback``: one :class:`DlperfNotifiers` when any notifier is configured."""
    factories = configured(notify_url, spec)
    return [DlperfNotifiers(factories)] if factories else []


def notify_findings(context: Mapping[str, Any], report: Mapping[str, Any], url: str | None,
                    notifiers: Iterable[BaseNotifier | Callable[[], BaseNotifier]] | None = None) -> int:
    """Send a regression report (``RegressionReport.to_dict()``) through ``notifiers`` (instances
    or factories; default :func:`configured`) when it has findings. Returns how many succeeded."""
    if not report.get("findings"):
        return 0
    msg = messages.findings_message(report, url)
    ctx = dict(context, dlperf_subject=msg["subject"], dlperf_message=msg["text"], dlperf_url=url,
               dlperf_report=dict(report))
    items = configured() if notifiers is None else list(notifiers)
    return _fan_out([_Factory(type(n).__name__, lambda n=n: n) if isinstance(n, BaseNotifier) else n
                     for n in items], ctx)


def findings_sender(context: Mapping[str, Any], notify_url: str | None = None,
                    spec: str | None = None) -> Callable[[Mapping[str, Any]], int]:
    """What the publish task hands to ``engine.finish.publish(notify=...)``: ``send(report)``
    sends the findings of one published run through every configured notifier, with the link
    to the run's results page."""
    factories = configured(notify_url, spec)
    base = _base_url()

    def send(report: Mapping[str, Any]) -> int:
        url = results_url(base, str(report.get("run_id"))) if base else None
        n = notify_findings(context, report, url, factories)
        _log.info("regression findings of %s sent through %d of %d notifier(s)", report.get("run_id"), n,
                  len(factories))
        return n

    return send
