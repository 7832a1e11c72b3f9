"""Open the configured results store and read history from it (through the store's index).

The store is chosen by :class:`dlperf_tasks.core.settings.Settings` (one setting): the ``url``
argument (CLI ``--store``), else ``$DLPERF_STORE_URL``, else the scheduler's ``store_url``, else
the one default (``file://<checkout>/.run/store``, where ``make run`` publishes). Accepted URLs are the store's:
``s3://bucket/prefix?endpoint=...`` (OSS and other S3-compatible stores too), ``file:///dir`` or a
plain directory path (:data:`dlperf_tasks.core.safeurl.STORE_SCHEMES`).
Credentials come only from the environment / Airflow connections (never from the URL).
"""

from __future__ import annotations

from typing import Any

from dlperf_tasks.history.runs import RunView, sort_runs
from dlperf_tasks.core.settings import Settings, env_name
from dlperf_tasks.store.layout import RUN_ID_RULE
from dlperf_tasks.store.store import open_store
from dlperf_tasks.core.errors import DlperfError

ENV = env_name("store_url")


def store_settings(url: str | None = None, settings=None):
    """The settings whose store is ``url`` (``--store``), else the configured one."""
    return (settings or Settings.load()).with_store(url)


def store_for(url: str | None = None, settings=None):
    """The :class:`dlperf_tasks.store.Store` for ``url`` / the settings' store."""
    return open_store(store_settings(url, settings))


def history_views(store: Any, suite: str, since: str | None = None) -> list[RunView]:
    """Every run of ``suite`` in the store's index (one read), oldest first."""
    return sort_runs(RunView.from_summary(s) for s in store.list_runs(suite=suite, since=since))


def resolve_run(store: Any, spec: str, suite: str | None = None) -> str:
    """A full run id from ``spec``: the id itself, ``latest`` (newest run, of ``suite`` if
    given) or a unique prefix of a run id. Raises DlperfError naming the candidates."""
    spec = spec or ""
    if any(c.isspace() or ord(c) < 32 or 0x7f <= ord(c) <= 0x9f for c in spec):
        raise DlperfError(f"run {spec!r}: no whitespace or control character (not even a trailing newline): "
                          f"{RUN_ID_RULE}; give it exactly")
    locate = getattr(store, "locate", None)
    if spec and spec != "latest" and locate is not None and "/" not in spec:
        try:  # an exact id: one read of its pointer object, no index (which may be huge or missing)
            locate(spec, suite=suite)
            return spec
        except DlperfError:
            pass
    if spec == "latest":
        runs = store.list_runs(suite=suite, limit=1)  # one summary held, whatever the index's length
        if not runs:
            raise DlperfError("no runs in the store" + (f" for suite {suite}" if suite else ""))
        return str(runs[-1].get("run_id"))
    if not spec:
        return spec
    found: set[str] = set()  # only the ids that start with spec (a streaming pass over the index)

    def match(r: dict) -> bool:
        rid = str(r.get("run_id"))
        if rid.startswith(spec):
            found.add(rid)
        return False

    store.list_runs(suite=suite, where=match)
    if spec in found:
        return spec
    matches = sorted(found)
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise DlperfError(f"run {spec!r} is ambiguous: {', '.join(matches[:8])}"
                          + (" ..." if len(matches) > 8 else ""))
    return spec  # not in the index: let the store say whether it exists (locate by pointer)
