"""Tell someone about regression findings: a webhook or a Python callable.

Target (argument, else env ``DLPERF_NOTIFY_URL``):

- ``http://...`` / ``https://...``: POST the report JSON (``Content-Type: application/json``);
- ``python:package.module:function`` (or ``package.module:function``): call
  ``function(report_dict)``.

Nothing is sent when there are no findings (unless ``always=True``). A failing notification
is reported as :class:`NotifyError`; callers in the pipeline log it and go on (a broken
webhook must not fail a benchmark run). The URL may carry a token: it is never logged, only
its scheme and host.
"""

from __future__ import annotations

import importlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping

from dlperf_tasks.errors import DlperfError

ENV = "DLPERF_NOTIFY_URL"


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
    target = target if target is not None else os.environ.get(ENV, "")
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
