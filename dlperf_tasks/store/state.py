"""Small JSON documents of the service's operating state in the store (``state/<name>.json``,
see :mod:`dlperf_tasks.store.layout`): every Celery worker and the CLI read and change the same
copy, whatever host they run on (workers share no disk).

Updates are read-modify-write with optimistic concurrency (:mod:`dlperf_tasks.store.cas`, the
suite indexes' too): a concurrent writer's change makes the conditional write fail and the
update is re-applied to the new content. Endpoints without conditional writes get a plain write
followed by a verifying re-read (a writer that read before our write and writes after our
re-read can still undo our change there: rare, since the state changes once per finished run or
CLI call).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from dlperf_tasks.store.backends import NotFound
from dlperf_tasks.store.cas import update_document


class StoreState:
    """One JSON document ``state/<name>.json`` of ``store`` (a :class:`dlperf_tasks.store.Store`)."""

    def __init__(self, store, name: str, empty: Callable[[], dict], attempts: int = 8, base_delay: float = 0.05):
        self.backend = store.backend
        self.key = store.layout.state_key(name)
        self.where = store.backend.describe(self.key)
        self.empty = empty
        self.attempts = attempts
        self.base_delay = base_delay

    def _read(self) -> tuple[dict, str | None]:
        try:
            data, etag = self.backend.get_bytes(self.key)
        except NotFound:
            return self.empty(), None
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"state {self.where} is unreadable: {exc}") from None
        return doc, etag

    def read(self) -> Any:
        return self._read()[0]

    def update(self, change: Callable[[Any], Any]) -> Any:
        """Apply ``change(doc)`` (it edits ``doc`` in place) and write the result; returns what
        ``change`` returned. Re-applied to the current content when someone wrote in between."""
        mine: list[str] = []

        def apply(doc, etag: str | None) -> tuple[bytes | None, Any]:
            before = json.dumps(doc, sort_keys=True)
            out = change(doc)
            mine[:] = [json.dumps(doc, sort_keys=True)]
            if mine[0] == before and etag is not None:
                return None, out  # nothing changed: no write
            return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode(), out

        return update_document(self.backend, self.key, self._read, apply,
                               lambda back: json.dumps(back, sort_keys=True) == mine[0],
                               what="the state", verify_conditional=False, attempts=self.attempts,
                               base_delay=self.base_delay)
