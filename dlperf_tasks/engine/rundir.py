"""The one run-directory model and the one run-id scheme.

A run directory holds everything one run of one suite produces before it is published::

    plan.json                 the plan (+ params, group, scheduler run id)
    env.json                  environment capture of the nodes (prepare)
    node-facts.json           what prepare learnt about each node (image digest, refused flags)
    logs/...                  node logs in the seeds' layout (Framework.log_relpath)
    trials/<trial key>.json   one trial record per finished trial (report.result_json.trial_record)
    result.json, report.md, plots/, stragglers.json, index files   (outputs step)

Re-running into the same directory runs only the trials without a valid record (status OK
and every log present) and aggregates everything again.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.core.model import Trial, TrialResult
from dlperf_tasks.report.result_json import trial_record
from dlperf_tasks.report.result_json import trial_from_record
from dlperf_tasks.remote.runtime import NodeFacts

FACTS_FILE = "node-facts.json"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,60}-\d{8}T\d{6}-[0-9a-f]{6}$")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(suite: str, salt: str | None = None) -> str:
    """``<suite>-<UTC yyyymmddThhmmss>-<6 hex>``: path safe, sortable, unique (the only scheme)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    tail = hashlib.sha1(f"{salt}/{suite}/{secrets.token_hex(4)}".encode()).hexdigest()[:6]
    return f"{suite}-{stamp}-{tail}"


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.fullmatch(text or ""))  # fullmatch: "$" would accept a trailing newline


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read_json(path: Path) -> Any:
    """The JSON document at ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class RunDir:
    """One run's directory (``path``) and id."""

    path: Path
    run_id: str

    @classmethod
    def at(cls, path: str | os.PathLike, run_id: str | None = None, suite: str = "run") -> "RunDir":
        """The run dir at ``path``; its run id is ``run_id``, else the one its plan.json holds,
        else a new one (a re-run into the same directory keeps its id)."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        prev = (read_json(p / "plan.json") or {}).get("run_id") if run_id is None else None
        return cls(p, run_id or prev or new_run_id(suite))

    # ---- files ------------------------------------------------------------------------
    def file(self, rel: str) -> Path:
        return self.path / rel

    def write(self, rel: str, data: Any) -> Path:
        return write_json(self.path / rel, data)

    def read(self, rel: str) -> Any:
        return read_json(self.path / rel)

    def trial_file(self, trial: Trial) -> Path:
        return self.path / "trials" / f"{trial.key}.json"

    # ---- trial records ----------------------------------------------------------------------
    def save_trial(self, result: TrialResult) -> dict[str, Any]:
        doc = trial_record(result)
        write_json(self.trial_file(result.trial), doc)
        return doc

    def load_trial(self, trial: Trial) -> TrialResult | None:
        doc = read_json(self.trial_file(trial))
        if not isinstance(doc, dict):
            return None
        try:
            r = trial_from_record(doc)
        except DlperfError:
            return None
        return r if r.trial == trial else None

    def load_trials(self) -> dict[str, TrialResult]:
        """Trial id -> result for every readable record (unreadable ones are ignored = re-run)."""
        found: dict[str, TrialResult] = {}
        d = self.path / "trials"
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                r = trial_from_record(json.loads(p.read_text()))
            except (OSError, ValueError, DlperfError):
                continue
            found[r.trial.id] = r
        return found

    def reusable(self, trial: Trial) -> TrialResult | None:
        """The trial's valid record when every log it names is still here (else: run it)."""
        r = self.load_trial(trial)
        if r is None or not r.valid or not r.log_paths:
            return None
        if not all((self.path / p).is_file() for p in r.log_paths):
            return None
        return r

    # ---- node facts (prepare -> trials) -------------------------------------------------------
    def save_facts(self, facts: Mapping[str, Any]) -> None:
        self.write(FACTS_FILE, {n: dataclasses.asdict(f) for n, f in facts.items()})

    def load_facts(self, nodes: list[str]):
        """NodeFacts of ``nodes`` written by prepare (None: not there; the trial probes itself)."""
        doc = self.read(FACTS_FILE)
        if not isinstance(doc, dict) or not all(n in doc for n in nodes):
            return None
        try:
            return {n: NodeFacts(**doc[n]) for n in nodes}
        except TypeError:
            return None


def write_plan(rd: RunDir, plan_doc: Mapping[str, Any], *, params: Mapping[str, Any], dag: str | None,
               dag_run_id: str | None, started_at: str, policy: str, cluster: str, dry_run: bool = False,
               **extra: Any) -> dict[str, Any]:
    """The ONE writer of a run dir's ``plan.json`` (the plan step, ``dlperf sweep``, an A/B
    confirmation run): the plan (``Plan.to_dict``) with the run's params, scheduler group and run
    id, start time, failure policy, cluster name and dry-run flag; ``extra`` adds a driver's own
    keys (an A/B run's ``image`` / ``nodes`` / ``confirm``). Returns the document written."""
    doc = {**plan_doc, "params": dict(params), "dag": dag, "dag_run_id": dag_run_id, "run_id": rd.run_id,
           "started_at": started_at, "policy": policy, "dry_run": bool(dry_run), "cluster": cluster, **extra}
    if extra.get("image") not in (None, plan_doc.get("image")) and "image_digest" not in extra:
        doc["image_digest"] = None  # the catalog's digest pins the catalog's image, not the one given here
    rd.write("plan.json", doc)
    return doc


def group_run_record(work_dir: str | os.PathLike, group: str, group_run_id: str) -> Path:
    """Where the run ids of one scheduled run of a group are remembered (a cleared, re-run
    scheduled run reuses its run dirs and only runs missing or invalid trials)."""
    h = hashlib.sha1(f"{group}\0{group_run_id}".encode()).hexdigest()[:20]
    return Path(work_dir) / "dag-runs" / f"{h}.json"
