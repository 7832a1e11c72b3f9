"""What the scheduled tasks call around their work (settings: :class:`dlperf_tasks.core.settings.Settings`):
a task's run dir on this worker, pulled from and pushed to the run's private staging area in the
object store (:mod:`dlperf_tasks.store.staging`: the tasks of one DAG run share no disk)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlperf_tasks.engine.storeaccess import engine_store
from dlperf_tasks.engine.rundir import group_run_record
from dlperf_tasks.engine.runset import RunSet, TrialItem
from dlperf_tasks.store.backends import NotFound, sha256_file
from dlperf_tasks.store.staging import (TRIALS_DIR, Staging, _valid_record, pull_runs, push_runs,  # noqa: F401
                                        rebase_item, trial_paths)

RUN_FILES = ("plan.json", "node-facts.json", "node-identity.json", "env.json")


def _store(settings):
    return engine_store(settings)


def _runs(run_set: RunSet) -> list[tuple[str, str]]:
    return [(r.run_id, r.run_dir) for r in run_set.runs]


def enter(run_set: RunSet | Mapping[str, Any] | None, settings, pull: bool = True) -> RunSet | None:
    """A run-level task starts: the run set on this worker, its staged files pulled."""
    if run_set is None:
        return None
    local = RunSet.of(run_set).rebased(settings.work_dir)
    if pull and local.runs:
        pull_runs(_store(settings), _runs(local))
    return local


def leave(run_set: RunSet | Mapping[str, Any] | None, settings, only: Iterable[str] | None = None) -> None:
    """A run-level task ends: what it wrote goes to staging (``only``: just those paths)."""
    run_set = RunSet.of(run_set) if run_set is not None else None
    if run_set and run_set.runs:
        push_runs(_store(settings), _runs(run_set), only=only)


def enter_trial(item: TrialItem | Mapping[str, Any], settings) -> TrialItem:
    """A trial task starts: its run dir on this worker with the run's files and this trial's
    earlier record (and, when that record is valid, its logs: the trial is then reused)."""
    local = TrialItem.of(item).rebased(settings.work_dir)
    if local.dry_run:
        return local
    st = Staging(_store(settings), local.run_id)
    rec = f"{TRIALS_DIR}/{local.key}.json"
    st.pull(local.run_dir, only=[*RUN_FILES, rec])
    path = Path(local.run_dir) / rec
    doc = _valid_record(path.read_bytes()) if path.is_file() else None
    if doc is not None:
        st.pull(local.run_dir, only=[str(p) for p in doc.get("logs") or []])
    return local


def leave_trial(item: TrialItem | Mapping[str, Any], settings) -> list[str]:
    """A trial task ends (any outcome that wrote a record, retried ones too): the record, its
    logs and telemetry go to staging. ``item`` is the rebased item :func:`enter_trial` returned."""
    item = TrialItem.of(item)
    if item.dry_run:
        return []
    try:
        record = json.loads((Path(item.run_dir) / TRIALS_DIR / f"{item.key}.json").read_text())
    except (OSError, ValueError):
        return []
    return Staging(_store(settings), item.run_id).push(item.run_dir, only=trial_paths(record, item.key))


def _group_record(settings, group: str, group_run_id: str) -> tuple[Path, str]:
    path = group_run_record(settings.work_dir, group, group_run_id)
    return path, path.name


def pull_group_record(settings, group: str, group_run_id: str) -> bool:
    """Before planning a scheduled run: the run ids an earlier try of it chose, from staging (a
    cleared DAG run planned on another worker reuses its run ids, hence its valid trials)."""
    path, name = _group_record(settings, group, group_run_id)
    store = _store(settings)
    try:
        data = store.backend.get_bytes(store.layout.staging_group_key(name))[0]
    except NotFound:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def push_group_record(settings, group: str, group_run_id: str) -> bool:
    """After planning: this scheduled run's run ids to staging."""
    path, name = _group_record(settings, group, group_run_id)
    if not path.is_file():
        return False
    store = _store(settings)
    store.backend.put_file(store.layout.staging_group_key(name), path, sha256_file(path), None)
    return True


def trials_done(settings, run_ids: Iterable[str], this: tuple[str, str] | None = None) -> int:
    """Trials with a record staged in any of ``run_ids`` (the runs of one DAG run), counting
    ``this`` (run id, trial key: a record saved here, not pushed yet) once: a DAG task's
    ``[done/planned]``."""
    store = _store(settings)
    seen: set[tuple[str, str]] = {this} if this else set()
    for run_id in run_ids:
        st = Staging(store, run_id)
        for key in store.backend.list_keys(st.prefix + TRIALS_DIR + "/"):
            rel = store.layout.staged_rel(run_id, key) or ""
            name = rel[len(TRIALS_DIR) + 1:]
            if name.endswith(".json") and "/" not in name:
                seen.add((run_id, name[:-len(".json")]))
    return len(seen)
