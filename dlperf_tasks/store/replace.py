"""``publish --replace``: after the new run is stored, nothing of the run it replaced remains.

The replaced run (the one the run pointer named before, see :mod:`dlperf_tasks.store.sameid`)
loses its index row, in whichever suite's index it stands (with the verdicts recorded on it,
such as ``regressions``: they judged the other run), and every object under its run path that
the new run's manifest does not list (its logs, report, annotations such as recorded verdicts).
Whatever cannot be removed is returned, so the command says what remains.
"""

from __future__ import annotations

import json
from typing import Any

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.cas import update_document
from dlperf_tasks.store.index import read_index
from dlperf_tasks.store.sameid import _read_json


def _drop_row(backend: Any, layout: Any, suite: str, run_id: str) -> None:
    key = layout.index_key(suite)

    def apply(doc: dict, _etag: str | None) -> tuple[bytes | None, None]:
        runs = [r for r in doc.get("runs", []) if not (isinstance(r, dict) and r.get("run_id") == run_id)]
        if len(runs) == len(doc.get("runs", [])):
            return None, None
        out = {**doc, "runs": runs}
        return (json.dumps(out, indent=1, sort_keys=True, allow_nan=False) + "\n").encode(), None

    update_document(backend, key, lambda: read_index(backend, key, suite), apply,
                    lambda back: not any(isinstance(r, dict) and r.get("run_id") == run_id for r in back["runs"]),
                    what="the index")


def old_location(backend: Any, layout: Any, run_id: str) -> dict | None:
    """The run pointer's ``{suite, path}`` before this publish (None: no run under this id)."""
    ptr = _read_json(backend, layout.pointer_key(run_id))
    return ptr if ptr and ptr.get("path") and ptr.get("suite") else None


def drop_old_row(backend: Any, layout: Any, old: dict, run_id: str) -> list[str]:
    """Remove the replaced run's index row (before the new row is written: none of its keys carry
    over). Returns what could not be removed."""
    try:
        _drop_row(backend, layout, str(old["suite"]), run_id)
    except StoreError as exc:
        return [f"its row in the index of {old['suite']} ({exc})"]
    return []


def remove_leftovers(backend: Any, layout: Any, old: dict, manifest: dict) -> list[str]:
    """Delete every object under the replaced run's path that the new run does not list."""
    keep = {layout.key_for_path(manifest["path"], o["path"]) for o in manifest.get("objects") or []}
    keep.add(layout.key_for_path(manifest["path"], "manifest.json"))
    prefix = layout.key_for_path(str(old["path"]), "manifest.json")[: -len("manifest.json")]
    left = []
    try:
        keys = backend.list_keys(prefix)
    except StoreError as exc:
        return [f"the objects under {prefix} ({exc})"]
    for key in keys:
        if key in keep:
            continue
        try:
            backend.delete(key)
        except StoreError:
            left.append(key)
    return left
