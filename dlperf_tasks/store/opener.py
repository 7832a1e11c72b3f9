"""The one way to open the configured store from settings (:class:`dlperf_tasks.core.settings.Settings`):
its URL, its redaction; credentials come from the environment or connections, never the URL."""

from __future__ import annotations

from dlperf_tasks.store.store import Store


def open_store(settings) -> Store:
    """The store of ``settings.store_url``, redacting as ``settings`` says (raises StoreError)."""
    return Store.from_settings(settings.store_url, redaction=settings.redaction_spec)
