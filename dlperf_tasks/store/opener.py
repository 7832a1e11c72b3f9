"""The one way to open the configured store from settings (:class:`dlperf_tasks.core.settings.Settings`):
its URL, its redaction; credentials come from the environment or connections, never the URL.

Every place that turns settings into a :class:`~dlperf_tasks.store.store.Store` calls
:func:`open_store` (tests/unit/test_settings_sources.py holds the code to it); ``Store.from_url`` and
``Store.from_settings`` stay the store's constructors for a URL or a store mapping."""

from __future__ import annotations

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.backends import NotFound
from dlperf_tasks.store.store import Store


def open_store(settings, **overrides) -> Store:
    """The store of ``settings.store_url``, redacting as ``settings`` says (raises StoreError).
    Keyword ``overrides`` that are not None (``redaction=`` from ``--redact``, ``inventory=``) win."""
    kw = {"redaction": settings.redaction_spec, **{k: v for k, v in overrides.items() if v is not None}}
    return Store.from_settings(settings.store_url, **kw)


def require_store(store: Store) -> Store:
    """``store`` when its location holds a store (anything published or staged there); else a
    one-line StoreError naming the location: a mistyped ``--store`` or ``$DLPERF_STORE_URL`` is an
    error for a reader, not an empty listing. Writers create the store and do not call this."""
    root = getattr(store.backend, "root", None)
    if root is not None and not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise StoreError(f"no store at {store.url()}: {root} {what} (mistyped --store or $DLPERF_STORE_URL?)")
    try:
        keys = store.backend.list_keys(store.prefix, delimiter="/")
    except NotFound:  # an endpoint that cannot list: the read itself names what is missing
        return store
    if not keys:
        raise StoreError(f"no store at {store.url()}: nothing was ever published there (mistyped --store or "
                         f"$DLPERF_STORE_URL? 'make run' publishes into the default store)")
    return store
