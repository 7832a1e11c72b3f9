"""Is the run id being published already taken by a *different* run?

Publishing writes the run pointer ``index/runs/<run_id>.json`` and the suite index row keyed
by run id, so a second, different run under an id the store already holds would silently
take its place (the first run's data lost from every listing). :func:`existing_other_run`
reads the pointer and, when there is one, the stored manifest, and says whether that run is
another one:

- the pointer names another path (another suite or date): another run;
- the same path, a manifest there: another run when its ``started_at`` differs, or, when
  neither run has a ``started_at``, when its ``result.json`` checksum differs;
- no pointer, or the same path without a manifest (an earlier attempt of this publish that
  failed midway): not another run.

Re-publishing the same run (same path, same start) stays the harmless no-op it always was.
"""

from __future__ import annotations

import json
from typing import Any

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import layout as L
from dlperf_tasks.store.backends import NotFound

_DOC_MAX = 16 << 20  # a manifest lists objects: small


def _read_json(backend: Any, key: str) -> dict | None:
    try:
        data, _ = backend.get_bytes(key, max_bytes=_DOC_MAX)
    except NotFound:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        raise StoreError(f"{backend.describe(key)}: not valid JSON") from None
    return doc if isinstance(doc, dict) else None


def _result_sha(manifest: dict) -> str | None:
    return next((o.get("sha256") for o in manifest.get("objects") or [] if o.get("path") == L.RESULT), None)


def describe(suite: Any, started_at: Any, path: Any) -> str:
    return f"suite {suite}, started {started_at or 'unknown'}, at {path}"


def existing_other_run(backend: Any, layout: Any, manifest: dict) -> str | None:
    """A description of the different run that the store holds under ``manifest["run_id"]``
    (``manifest``: the spool's), or None when the id is free or holds this same run."""
    run_id = manifest["run_id"]
    ptr = _read_json(backend, layout.pointer_key(run_id))
    if not ptr:
        return None
    path = str(ptr.get("path") or "")
    try:
        old = _read_json(backend, layout.key_for_path(path, L.MANIFEST)) if path else None
    except StoreError:
        old = None
    old_started = (old or {}).get("started_at")
    if path != manifest["path"]:
        return describe(ptr.get("suite"), old_started, path)
    if old is None:
        return None  # an incomplete earlier attempt of this very publish
    new_started = manifest.get("started_at")
    if old_started or new_started:
        same = str(old_started) == str(new_started)
    else:
        new_sha = _result_sha(manifest)
        same = new_sha is not None and new_sha == _result_sha(old)
    return None if same else describe(old.get("suite", ptr.get("suite")), old_started, path)


def refuse_message(store_url: str, manifest: dict, other: str) -> str:
    return (f"run id {manifest['run_id']!r} is already taken in {store_url} by a different run ({other}); "
            f"this run: {describe(manifest['suite'], manifest.get('started_at'), manifest['path'])}. "
            f"Nothing was uploaded. Give this run another id, or publish with --replace to replace the stored one")
