"""Tell someone about regression findings and failures: a webhook or a Python callable.

In Airflow this is one notifier among others: the scheduler layer's notifier module wraps it as a
``BaseNotifier`` next to Slack, e-mail or Apprise notifiers, all fed the same message
(:func:`findings_message`, :func:`failure_message`: subject + text + link).

Target (argument, else env ``DLPERF_NOTIFY_URL``):

- ``http://...`` / ``https://...``: POST the report JSON (``Content-Type: application/json``);
- ``python:package.module:function`` (or ``package.module:function``): call
  ``function(report_dict)``.

:func:`parse_notifier_specs` reads the list of extra notifiers (``[dlperf] notifiers``: import
paths of notifier classes, with keyword arguments) without importing anything.

Nothing is sent when there are no findings (unless ``always=True``). A failing notification
is reported as :class:`NotifyError`; callers in the pipeline log it and go on (a broken
webhook must not fail a benchmark run). The URL may carry a token: it is never logged, only
its scheme and host.
"""

from __future__ import annotations

import importlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.core.settings import env_name, env_value
from dlperf_tasks.history.basis import badge, basis_of
from dlperf_tasks.history.basis import basis_line

ENV = env_name("notify_url")
_IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*([.:][A-Za-z_][A-Za-z0-9_]*)$")


class NotifyError(DlperfError):
    """A notification target is malformed or could not be reached."""


def redact_target(target: str) -> str:
    """Scheme and host only (webhook URLs often embed secrets)."""
    if target.startswith(("http://", "https://")):
        u = urllib.parse.urlsplit(target)
        return f"{u.scheme}://{u.hostname}{':' + str(u.port) if u.port else ''}/..."
    return target


def resolve_callable(spec: str) -> Callable[[Mapping[str, Any]], Any]:
    spec = spec[len("python:"):] if spec.startswith("python:") else spec
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise NotifyError(f"notification target {spec!r}: expected http(s)://... or python:module:function")
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise NotifyError(f"notification target {spec!r}: cannot import: {exc}") from None
    if not callable(fn):
        raise NotifyError(f"notification target {spec!r} is not callable")
    return fn


def notify(report: Mapping[str, Any], target: str | None = None, *, always: bool = False,
           timeout: float = 10.0) -> bool:
    """Send ``report`` (a :meth:`RegressionReport.to_dict`). Returns True if something was sent."""
    target = target if target is not None else (env_value("notify_url") or "")
    target = (target or "").strip()
    if not target or (not always and not report.get("findings")):
        return False
    if target.startswith(("http://", "https://")):
        body = json.dumps(report).encode()
        req = urllib.request.Request(target, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "dlperf"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                if resp.status >= 300:
                    raise NotifyError(f"webhook {redact_target(target)} answered HTTP {resp.status}")
        except urllib.error.HTTPError as exc:
            raise NotifyError(f"webhook {redact_target(target)} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise NotifyError(f"webhook {redact_target(target)} unreachable: {reason}") from None
        return True
    resolve_callable(target)(report)
    return True


def parse_notifier_specs(text: str | None) -> list[tuple[str, dict[str, Any]]]:
    """The scheduler layer's list of extra notifiers (``[dlperf] notifiers``) as ``[(import path,
    keyword arguments)]``. ``text``: a JSON list whose items are ``"package.module.Name"`` (or
    ``"package.module:Name"``) or ``{"class": "package.module.Name", "kwargs": {...}}``; or, not
    JSON, import paths separated by commas/whitespace. Empty -> ``[]``. Nothing is imported here."""
    text = (text or "").strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise NotifyError(f"notifiers: not valid JSON: {exc}") from None
    else:
        items = [t for t in text.replace(",", " ").split() if t]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            path, kwargs = item, {}
        elif isinstance(item, dict) and set(item) <= {"class", "kwargs"} and isinstance(item.get("class"), str):
            path, kwargs = item["class"], item.get("kwargs") or {}
        else:
            raise NotifyError(f"notifiers[{i}]: expected \"package.module.Name\" or "
                              f"{{\"class\": ..., \"kwargs\": {{...}}}}, not {item!r}")
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise NotifyError(f"notifiers[{i}] ({path}): kwargs must be an object")
        if not _IMPORT_PATH.match(path):
            raise NotifyError(f"notifiers[{i}]: {path!r} is not an import path (package.module.Name)")
        out.append((path, dict(kwargs)))
    return out


def import_object(path: str) -> Any:
    """``package.module.Name`` or ``package.module:Name`` -> the object (NotifyError if missing)."""
    mod_name, sep, attr = path.partition(":")
    if not sep:
        mod_name, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise NotifyError(f"notifier {path!r}: cannot import: {exc}") from None


def findings_message(report: Mapping[str, Any], results_url: str | None = None) -> dict[str, Any]:
    """Subject and text of a regression report (a :meth:`RegressionReport.to_dict`), or of an
    A/B confirmation (``kind: confirmation``, :func:`history.confirm.record`)."""
    findings = report.get("findings") or []
    if report.get("kind") == "confirmation":
        return _confirmation_message(report, findings, results_url)

    subject = (f"dlperf: {len(findings)} regression(s) in {report.get('suite')} run {report.get('run_id')}"
               if findings else f"dlperf: {badge(basis_of(report))[1]} in {report.get('suite')} run "
                                f"{report.get('run_id')}")

    lines = [subject] + [_finding_line(f) for f in findings] + [f"basis: {basis_line(basis_of(report))}"]
    flagged = report.get("cell_flags") or {}
    lines += [f"flags {cid}: {text}" for cid, text in sorted(flagged.items())]
    if results_url:
        lines.append(f"results: {results_url}")
    return {"kind": "findings", "subject": subject, "text": "\n".join(lines), "url": results_url,
            "report": dict(report)}


def _finding_line(f: Mapping[str, Any]) -> str:
    """One finding of a regression report (a verdict's dict) as a message line."""
    env = ("; env: " + ", ".join(f"{k} {d.get('baseline')} -> {d.get('current')}" for k, d in f["env_diff"].items())
           if f.get("env_diff") else "")
    if f.get("kind") == "loss":  # "fast but wrong?": the note names the final loss and the band
        return f"- LOSS {f.get('cell_id')}: {f.get('note')}{env}"
    ci = f.get("ci_pct")
    delta = f"{f['delta_pct']:+.2f}%" if isinstance(f.get("delta_pct"), (int, float)) else "change n/a"
    return (f"- {f.get('kind')} {f.get('cell_id')}: {f.get('baseline')} -> {f.get('current')} {f.get('unit') or ''} "
            f"({delta}" + (f", 95% interval [{ci[0]:+.2f}, {ci[1]:+.2f}]%" if ci else "") + ")" + env)


def _confirmation_message(report: Mapping[str, Any], findings: list, results_url: str | None) -> dict[str, Any]:
    subject = (f"dlperf: A/B confirmed {', '.join(str(f.get('finding')) for f in findings)} "
               f"of run {report.get('run_id')}")
    lines = [subject]
    for f in findings:
        lines.append(f"- {f.get('finding')}: {f.get('image_a')} (A) vs {f.get('image_b')} (B), "
                     f"{f.get('rounds')} rounds on {', '.join(f.get('nodes') or [])}: {f.get('note')}")
        for k, d in (f.get("env_diff") or {}).items():
            lines.append(f"  env {k}: {d.get('baseline')} -> {d.get('current')}")
    if results_url:
        lines.append(f"results: {results_url}")
    return {"kind": "confirmation", "subject": subject, "text": "\n".join(lines), "url": results_url,
            "report": dict(report)}


def failure_message(dag_id: str, dag_run_id: str, task_id: str | None, error: str,
                    log_url: str | None = None) -> dict[str, Any]:
    """Subject and text of a failed DAG run / task."""
    where = f"task {task_id} of " if task_id else ""
    subject = f"dlperf: {where}{dag_id} run {dag_run_id} failed"
    text = f"{subject}: {error}" + (f"\nlogs: {log_url}" if log_url else "")
    return {"kind": "failure", "subject": subject, "text": text, "url": log_url,
            "dag_id": dag_id, "dag_run_id": dag_run_id, "task_id": task_id, "error": error}
