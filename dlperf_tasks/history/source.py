"""Open the configured results store and read history from it (through the store's index).

The store is chosen by, first found wins: the ``url`` argument (CLI ``--store``), the
environment variable ``DLPERF_STORE``, then the store settings of :class:`dlperf_tasks.store.Store`
(``Store.from_settings()``: ``$DLPERF_STORE_URL`` or the default local store; the
Airflow plugin also reads ``[dlperf] store_url``). Accepted URLs are the store's:
``s3://bucket/prefix?endpoint=...``, ``oss://...``, ``file:///dir`` or a plain directory path.
Credentials come only from the environment / Airflow connections (never from the URL).
"""

from __future__ import annotations

import os
from typing import Any

from dlperf_tasks.history.runs import RunView, sort_runs

ENV = "DLPERF_STORE"


def open_store(url: str | None = None):
    """The :class:`dlperf_tasks.store.Store` for ``url`` / ``$DLPERF_STORE`` / settings."""
    from dlperf_tasks.store.store import Store

    url = url or os.environ.get(ENV) or None
    if url:
        return Store.from_url(url)
    return Store.from_settings()  # $DLPERF_STORE_URL or the default local store


def history_views(store: Any, suite: str, since: str | None = None) -> list[RunView]:
    """Every run of ``suite`` in the store's index (one read), oldest first."""
    return sort_runs(RunView.from_summary(s) for s in store.list_runs(suite=suite, since=since))
