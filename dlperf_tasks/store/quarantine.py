"""The quarantined nodes (node health, :mod:`dlperf_tasks.policy.nodehealth`): persisted in the run
store of the settings (``state/quarantine.json``, :mod:`dlperf_tasks.store.state`), shared by every
worker, DAG run and CLI on any host; or ``<dir>/quarantine.json`` under an flock (one host: tests,
a library user's sweep). Private: never listed as a run, never published."""

from __future__ import annotations

import fcntl
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from dlperf_tasks.store.state import StoreState
from dlperf_tasks.store.store import open_store

STATE_FILE = "quarantine.json"


def _empty() -> dict:
    return {"schema_version": 1, "nodes": {}}


def _checked(doc: Any, where: str) -> dict:
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), dict):
        raise ValueError(f"quarantine state {where} is malformed (no 'nodes' mapping)")
    return doc


class _FileState:
    """``<dir>/quarantine.json``; updates hold an flock on ``quarantine.json.lock`` and replace
    the file atomically (one host only)."""

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory) / STATE_FILE
        self.where = str(self.path)

    def read(self) -> Any:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return _empty()
        except (OSError, ValueError) as exc:
            raise ValueError(f"quarantine state {self.path} is unreadable: {exc}") from None

    def update(self, change) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".json.lock"), "a+") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            doc = _checked(self.read(), self.where)
            out = change(doc)
            tmp = self.path.with_suffix(f".json.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
            return out


class Quarantine:
    """The quarantined nodes: ``{schema_version, nodes: {node: {since, run_id, evidence}}}``.

    ``location``: a :class:`dlperf_tasks.store.Store` (the service: ``state/quarantine.json``,
    shared by every worker and host; :meth:`for_settings`) or a directory (``quarantine.json``
    in it, one host)."""

    def __init__(self, location):
        if hasattr(location, "backend") and hasattr(location, "layout"):
            self.state = StoreState(location, "quarantine", _empty)
        else:
            self.state = _FileState(location)
        self.where = self.state.where

    @classmethod
    def for_settings(cls, settings) -> "Quarantine":
        """The service's quarantine: in the store of ``settings`` (:func:`~dlperf_tasks.store.store.open_store`)."""
        return cls(open_store(settings))

    def read(self) -> dict:
        return _checked(self.state.read(), self.where)

    def nodes(self) -> dict[str, dict]:
        return dict(self.read()["nodes"])

    def add(self, node: str, evidence: Sequence[str], run_id: str = "") -> None:
        entry = {"since": datetime.now(timezone.utc).isoformat(timespec="seconds"), "run_id": run_id,
                 "evidence": list(evidence)}
        self.state.update(lambda doc: _checked(doc, self.where)["nodes"].__setitem__(node, entry))

    def clear(self, node: str) -> bool:
        """Take ``node`` out of quarantine; False when it was not quarantined."""
        return self.state.update(lambda doc: _checked(doc, self.where)["nodes"].pop(node, None) is not None)
