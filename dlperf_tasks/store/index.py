"""The per-suite index ``<prefix>/index/<suite>.json``: one summary per published run, so
"the last N runs of this cell" is a single read (no bucket listing).

Index document::

    {"schema_version": 1, "suite": "mxnet-bert", "runs": [<summary>, ...]}   # oldest first

Summary (built by :func:`run_summary` from the *redacted* result JSON)::

    {"run_id", "suite", "framework", "date": "YYYY-MM-DD", "started_at", "finished_at",
     "status": "ok|partial|failed", "path": "runs/<suite>/<date>/<run_id>",
     "manifest_sha256": "...", "n_cells": 4, "window": {"warmup": 20, "measure": 100},
     "cells": {cell_id: {"median_speed", "average_speed", "speedup", "n_valid", "n_invalid",
                         "trial_values", "metric_kind", "unit", "topology", "batch_size_per_device",
                         "precision", "model"}},
     "env": {"image", "image_digest", "upstream_commit", "dag_run_id", "nodes": <count>, "env": {...}}}

Updates use optimistic concurrency (If-Match / If-None-Match) where the backend supports
conditional writes; otherwise read-modify-write followed by a verifying re-read. Either way
a concurrent publisher's entry is never lost, and re-publishing a run replaces its entry.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterator, Mapping

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.backends import Backend, NotFound
from dlperf_tasks.store.cas import update_document
from dlperf_tasks.store.index_stream import iter_index_runs
from dlperf_tasks.store.limits import MAX_INDEX_ENV, Limits, check_size, pieces
from dlperf_tasks.store.readback import row_problem

log = logging.getLogger(__name__)

INDEX_SCHEMA_VERSION = 1
_CELL_KEYS = ("median_speed", "average_speed", "speedup", "n_valid", "n_invalid", "metric_kind", "unit",
              "topology", "batch_size_per_device", "precision", "model", "nodes", "gpus", "xla", "speedup_state",
              "final_losses", "gpu_memory_mib")  # telemetry/loss: the history "fast but wrong?" reads


def run_status(result: Mapping[str, Any]) -> str:
    """``run.status`` if the result carries one, else ok (every cell has valid trials),
    partial (some) or failed (none / no cells)."""
    explicit = (result.get("run") or {}).get("status")
    if explicit:
        return str(explicit)
    cells = result.get("cells") or []
    valid = [int(c.get("n_valid") or 0) > 0 for c in cells]
    if not valid or not any(valid):
        return "failed"
    return "ok" if all(valid) else "partial"


def run_summary(result: Mapping[str, Any], path: str, date: str, manifest_sha256: str | None = None) -> dict:
    run = result.get("run") or {}
    cells: dict[str, Any] = {}
    for c in result.get("cells") or []:
        cid = c.get("cell_id")
        if not cid:
            continue
        entry = {k: c.get(k) for k in _CELL_KEYS if k in c}
        entry["trial_values"] = [t.get("value") for t in c.get("trials") or []
                                 if str(t.get("status", "OK")).upper() == "OK" and t.get("value") is not None]
        cells[cid] = entry
    cluster = run.get("cluster") or {}
    env = {
        "image": run.get("image"), "image_digest": run.get("image_digest"),
        "upstream_commit": run.get("upstream_commit"), "dag_run_id": run.get("dag_run_id"),
        "nodes": len(cluster.get("nodes") or []), "env": run.get("env") or {},
    }
    return {
        "run_id": run.get("run_id"), "suite": run.get("suite"), "framework": run.get("framework"),
        "date": date, "started_at": run.get("started_at"), "finished_at": run.get("finished_at"),
        "status": run_status(result), "path": path, "manifest_sha256": manifest_sha256,
        "n_cells": len(cells), "cells": cells, "env": env,
        "window": run.get("window"),  # the training length: final losses compare only within one
    }


def _sort_key(s: Mapping[str, Any]) -> tuple:
    return (str(s.get("started_at") or s.get("date") or ""), str(s.get("run_id") or ""))


def parse_index(data: bytes, where: str) -> dict:
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise StoreError(f"{where}: index is not valid JSON (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreError(f"{where}: index is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise StoreError(f"{where}: index has no 'runs' list")
    return doc


def _index_size(backend: Backend, key: str, limits: Limits) -> bool:
    """False when the index does not exist; StoreError when it is above the bound (checked
    with HEAD/stat before anything is read)."""
    info = backend.head(key, with_checksum=False)
    if info is None:
        return False
    check_size(info.size, limits.max_index_bytes, backend.describe(key), "the index", MAX_INDEX_ENV)
    return True


def read_index(backend: Backend, key: str, suite: str) -> tuple[dict, str | None]:
    """(index document, etag); an empty index when the key does not exist yet. Its size is
    checked first and the read never goes past the bound (store/limits.py)."""
    limits = Limits.from_env()
    try:
        if not _index_size(backend, key, limits):
            raise NotFound(key)
        data, etag = backend.get_bytes(key, max_bytes=limits.max_index_bytes)
    except NotFound:
        return {"schema_version": INDEX_SCHEMA_VERSION, "suite": suite, "runs": []}, None
    return parse_index(data, backend.describe(key)), etag


def iter_index(backend: Backend, key: str) -> Iterator[dict]:
    """The run summaries of the index at ``key`` one by one, read in bounded pages (nothing
    when it does not exist). See store/index_stream.py."""
    limits = Limits.from_env()
    try:
        if not _index_size(backend, key, limits):
            return
        src = backend.open(key)
    except NotFound:
        return
    where = backend.describe(key)
    seen = 0
    try:
        with src:
            for row in iter_index_runs(pieces(src, limits.max_index_bytes, where), where):
                seen += 1
                if _usable(row, where, seen - 1):
                    yield row
    except StoreError as exc:
        if "not valid JSON" not in str(exc):
            raise
        # a row the streaming parser cannot take (an integer beyond 64 bits, a lone surrogate,
        # 1e400: written before publish refused them): the index read whole, that row skipped
        try:
            data, _ = backend.get_bytes(key, max_bytes=limits.max_index_bytes)
            rows = parse_index(data, where)["runs"]
        except (StoreError, NotFound, RecursionError):
            raise exc from None
        for i, row in enumerate(rows[seen:], start=seen):
            if _usable(row, where, i):
                yield row


def _usable(row: Any, where: str, i: int) -> bool:
    """False (with a warning naming the row) for an index row a reader cannot use."""
    problem = row_problem(row)
    if problem:
        rid = row.get("run_id") if isinstance(row, dict) and isinstance(row.get("run_id"), str) else "?"
        log.warning("%s: index row %d (run %s) skipped: %s", where, i, ascii(rid)[:120], problem)
    return not problem


def _merged(doc: dict, summary: Mapping[str, Any]) -> dict:
    """Insert/replace the row of ``summary["run_id"]``; keys the old row has and the summary
    lacks (annotations such as ``regressions``) are kept. A row no reader can use (written
    before publish refused such values) is left out, with a warning: its run stays in the store."""
    where = f"index of {doc.get('suite')}"
    usable = [r for i, r in enumerate(doc.get("runs", [])) if _usable(r, where, i)]
    old = next((r for r in usable if r.get("run_id") == summary["run_id"]), {})
    runs = [r for r in usable if r.get("run_id") != summary["run_id"]]
    runs.append({**old, **summary})
    runs.sort(key=_sort_key)
    return {"schema_version": INDEX_SCHEMA_VERSION, "suite": doc.get("suite") or summary.get("suite"),
            "runs": runs}


def _encode(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def update_index(backend: Backend, key: str, summary: Mapping[str, Any], attempts: int = 8,
                 base_delay: float = 0.05) -> None:
    """Insert/replace ``summary`` in the index at ``key`` without losing concurrent updates."""
    suite = str(summary.get("suite"))
    problem = row_problem(summary)
    if problem:
        raise StoreError(f"index row of run {summary.get('run_id')!r}: {problem}: the index's readers could not "
                         f"read it back; refused")

    def apply(doc: dict, _etag: str | None) -> tuple[bytes | None, None]:
        existing = next((r for r in doc["runs"] if r.get("run_id") == summary["run_id"]), None)
        if existing is not None and all(existing.get(k) == v for k, v in summary.items()):
            return None, None  # already there, nothing to write (idempotent re-publish)
        return _encode(_merged(doc, summary)), None

    update_document(backend, key, lambda: read_index(backend, key, suite), apply,
                    lambda back: any(r.get("run_id") == summary["run_id"] for r in back["runs"]),
                    what="the index", attempts=attempts, base_delay=base_delay)
