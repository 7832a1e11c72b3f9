"""The engine's store: the configured one (:func:`dlperf_tasks.store.store.open_store`); a store that cannot be
opened fails the task for good (retrying does not fix a setting)."""

from __future__ import annotations

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.safeurl import safe_url
from dlperf_tasks.engine.errors import NonRetriable
from dlperf_tasks.store.store import open_store


def engine_store(settings):
    """The configured store (credentials from the environment / connections, never the URL)."""
    try:
        return open_store(settings)
    except StoreError as exc:
        raise NonRetriable(f"store {safe_url(settings.store_url)}: {exc}") from None
