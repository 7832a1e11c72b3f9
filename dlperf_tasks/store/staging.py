"""A scheduled run's private staging area in the object store: no shared disk between tasks.

The tasks of one DAG run may execute on different Celery workers (different hosts, different
``work_dir``). Each task works in ITS OWN run directory ``<work_dir>/<run_id>``
(``dlperf_tasks.engine.runset``'s ``rebased``) and hands what it produced to the next task
through ``<prefix>/staging/<run_id>/`` (keys: :class:`dlperf_tasks.store.layout.Layout`):

- plan pushes ``plan.json``; prepare pushes ``node-facts.json``/``env.json``;
- a trial pulls the staging area first (node facts, earlier trials' records: a valid record
  is reused, not run again), then pushes its record, logs and telemetry;
- collect/aggregate/publish pull everything; aggregate pushes its outputs.

Staging is unredacted and private: it is never listed as a run, and publishing reads a
local copy through the store's redacting publish (so redaction still happens before anything
reaches the published prefix). A re-run overwrites nothing valid: a staged valid trial record
(status OK) is never replaced by a record that is not valid, nor are the logs it names.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlperf_tasks.store.backends import NotFound, sha256_file
from dlperf_tasks.store.runfiles import LOCK_NAME, walk

log = logging.getLogger(__name__)

# never staged: the publish spool (redacted copies + the local-only redaction map), temp files
_EXCLUDED_DIRS = ("publish-spool", "local-only")
TRIALS_DIR = "trials"


def rebase_item(item: Mapping[str, Any], work_dir: str | os.PathLike) -> dict[str, Any]:
    """``item`` (a dict naming a ``run_id``, e.g. an aggregate summary) with ``run_dir`` = this
    worker's ``<work_dir>/<run_id>`` (the planning worker's path means nothing on another host)."""
    out = dict(item)
    if out.get("run_id"):
        out["run_dir"] = str(Path(work_dir) / out["run_id"])
    return out


def _local_files(run_dir: Path) -> list[str]:
    """The run dir's regular files; links, hard links and special files are skipped and named
    in the log, never followed (store/runfiles.py), as are temp files and the publish lock."""
    files, refused = walk(run_dir, "")
    for item in refused:
        if item["path"].split("/", 1)[0] not in _EXCLUDED_DIRS:
            log.warning("staging: not pushed: %s: %s", item["path"], item["reason"])
    out = []
    for rel in files:
        name = rel.rsplit("/", 1)[-1]
        if name.endswith(".tmp") or name.startswith(".tmp-") or name == LOCK_NAME:
            continue
        if rel.split("/", 1)[0] in _EXCLUDED_DIRS:
            continue
        out.append(rel)
    return out


def _valid_record(data: bytes | None) -> dict | None:
    """The trial part of a trial record (``report.result_json.trial_record``) if it is a
    valid one (status OK), else None."""
    try:
        doc = json.loads(data) if data else None
    except ValueError:
        return None
    trial = doc.get("trial") if isinstance(doc, dict) else None
    return trial if isinstance(trial, dict) and trial.get("status") == "OK" else None


class Staging:
    """The staging area of run ``run_id`` in ``store`` (a :class:`dlperf_tasks.store.Store`)."""

    def __init__(self, store, run_id: str):
        self.backend = store.backend
        self.layout = store.layout
        self.run_id = run_id
        self.prefix = self.layout.staging_prefix(run_id)

    def keys(self) -> list[str]:
        return [k for k in self.backend.list_keys(self.prefix) if self.layout.staged_rel(self.run_id, k)]

    def rels(self) -> list[str]:
        return [self.layout.staged_rel(self.run_id, k) for k in self.keys()]

    def _get(self, rel: str) -> bytes | None:
        try:
            return self.backend.get_bytes(self.layout.staging_key(self.run_id, rel))[0]
        except NotFound:
            return None

    def _protected(self, run_dir: Path, rels: list[str]) -> set[str]:
        """Staged paths a push must not overwrite: valid staged trial records this worker
        holds no identical copy of, and the logs those records name."""
        out: set[str] = set()
        for rel in rels:
            if not rel.startswith(TRIALS_DIR + "/"):
                continue
            staged = self._get(rel)
            doc = _valid_record(staged)
            local = run_dir / rel
            if doc is None or (local.is_file() and local.read_bytes() == staged):
                continue
            out.add(rel)
            out.update(str(p) for p in doc.get("logs") or [])
        return out

    def push(self, run_dir: str | os.PathLike, only: Iterable[str] | None = None) -> list[str]:
        """Upload the run dir's files (or the ``only`` paths, files or directories) that differ
        from the staged copy; returns the paths uploaded."""
        run_dir = Path(run_dir)
        rels = _local_files(run_dir) if run_dir.is_dir() else []
        if only is not None:
            wanted = [w.rstrip("/") for w in only]
            rels = [r for r in rels if any(r == w or r.startswith(w + "/") for w in wanted)]
        protected = self._protected(run_dir, rels)
        sent = []
        for rel in rels:
            key = self.layout.staging_key(self.run_id, rel)
            digest = sha256_file(run_dir / rel)
            info = self.backend.head(key, with_checksum=True)
            if info is not None and info.sha256 == digest:
                continue
            if info is not None and rel in protected:
                continue  # a valid result of an earlier try stays
            self.backend.put_file(key, run_dir / rel, digest, None)
            sent.append(rel)
        return sent

    def pull(self, run_dir: str | os.PathLike, only: Iterable[str] | None = None) -> list[str]:
        """Download every staged file (or the ``only`` paths, files or directories) the run dir
        lacks or holds a different copy of (a local file not staged is kept). Returns the paths
        written."""
        run_dir = Path(run_dir)
        got = []
        rels = self.rels()
        if only is not None:
            wanted = [w.rstrip("/") for w in only]
            rels = [r for r in rels if any(r == w or r.startswith(w + "/") for w in wanted)]
        for rel in rels:
            dest = run_dir / rel
            info = self.backend.head(self.layout.staging_key(self.run_id, rel), with_checksum=True)
            if info is None or (dest.is_file() and info.sha256 == sha256_file(dest)):
                continue
            data = self._get(rel)
            if data is None:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".tmp-{dest.name}")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
            got.append(rel)
        return got


def pull_runs(store, runs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Pull the staging area of every ``(run_id, run_dir)`` (this worker's run dir) into the run dir."""
    out: dict[str, list[str]] = {}
    for run_id, run_dir in runs:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        out[run_id] = Staging(store, run_id).pull(run_dir)
    return out


def push_runs(store, runs: Iterable[tuple[str, str]], only: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Push every ``(run_id, run_dir)`` (or only the ``only`` paths) to staging."""
    out: dict[str, list[str]] = {}
    for run_id, run_dir in runs:
        out[run_id] = Staging(store, run_id).push(run_dir, only=only)
    return out


def trial_paths(record: Mapping[str, Any], trial_key: str) -> list[str]:
    """What one trial task hands over: its record, its logs, its telemetry."""
    trial = record.get("trial") or {}
    return [f"{TRIALS_DIR}/{trial_key}.json", *[str(p) for p in trial.get("logs") or []],
            f"telemetry/{trial_key}"]
