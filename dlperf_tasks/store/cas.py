"""Read-modify-write of one small JSON document in the store without losing a concurrent
writer's change (the suite indexes, :mod:`dlperf_tasks.store.index`; the service state,
:mod:`dlperf_tasks.store.state`).

The write carries the etag of the read (If-Match, or If-None-Match for a new document); a
concurrent writer makes it fail with PreconditionFailed and the change is applied again to the
new content, after a randomised exponential back-off. Endpoints without conditional writes get
a plain write followed by a verifying re-read.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, TypeVar

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.backends import Backend, NotSupported, PreconditionFailed

Doc = TypeVar("Doc")


def update_document(backend: Backend, key: str, read: Callable[[], tuple[Doc, str | None]],
                    apply: Callable[[Doc, str | None], tuple[bytes | None, Any]], verify: Callable[[Doc], bool], *,
                    what: str, verify_conditional: bool = True, attempts: int = 8, base_delay: float = 0.05) -> Any:
    """``read()`` -> (document, etag or None when absent); ``apply(doc, etag)`` -> (bytes to write,
    or None when nothing changed; the value to return); ``verify(doc read back)`` -> the write is
    there. ``verify_conditional``: verify after a conditional write too (catches an endpoint that
    silently ignores If-Match). Raises StoreError naming ``what`` after ``attempts`` tries."""
    conditional = bool(getattr(backend, "supports_conditional", False))
    last: Exception | None = None
    for attempt in range(attempts):
        doc, etag = read()
        data, out = apply(doc, etag)
        if data is None:
            return out
        try:
            if conditional:
                backend.put_bytes(key, data, content_type="application/json", if_match=etag,
                                  if_none_match=etag is None)
            else:
                backend.put_bytes(key, data, content_type="application/json")
            if (conditional and not verify_conditional) or verify(read()[0]):
                return out
            last = StoreError(f"{backend.describe(key)}: changed by another writer right after the write")
        except NotSupported:
            conditional = False  # endpoint without conditional PUT: plain write + verifying re-read
            continue
        except PreconditionFailed as exc:
            last = exc
        time.sleep(base_delay * (2 ** attempt) * (0.5 + random.random()))
    raise StoreError(f"{backend.describe(key)}: could not update {what} after {attempts} attempts: {last}")
