"""The typed state the engine's DAG steps hand each other: the *run set* planning makes, its
runs, and the planned trials a mapped trial task runs.

Inside the engine these are dataclasses; between Airflow tasks (XCom) they travel as the
JSON-safe dicts :meth:`RunSet.to_dict` / :meth:`TrialItem.to_dict` make, and
``from_dict`` reads them back (only the scheduler layer converts). The dict shapes::

    run set  {"runs": [run, ...], "trials": [item, ...], "trial_keys": [...], "dry_run": bool,
              "policy": str, "cluster": str, "params": {...}, "confirm": {...} (A/B runs only)}
    run      {run_id, run_dir, suite, framework, image, upstream_commit, started_at, window,
              n_trials, summary, rerun, variant ("A"/"B": A/B runs only)}
    item     {run_id, run_dir, suite, trial (Trial.to_dict), trial_id, key, dry_run, policy,
              image, planned, planned_runs}

The plan's XCom leaves ``trials`` out (``to_dict(trials=False)``): the items go to the mapped
trial tasks one each. Malformed input raises :class:`RunSetError` naming the field.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from dlperf_tasks.core.model import Trial

_NONE = object()


class RunSetError(ValueError):
    """A run set, run or trial item that is not what planning makes (names the field)."""


def _field(d: Mapping[str, Any], name: str, kind: type | tuple, where: str, default: Any = _NONE) -> Any:
    """``d[name]`` checked to be ``kind`` (``default`` when absent or None, if one is given)."""
    value = d.get(name)
    if value is None:
        if default is not _NONE:
            return default
        raise RunSetError(f"{where}.{name}: missing")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        shown = f" {value!r}"[:61] if isinstance(value, (str, int, float)) else ""
        raise RunSetError(f"{where}.{name}: expected {names}, got {type(value).__name__}{shown}")
    return value


def _mapping(d: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise RunSetError(f"{where}: expected a mapping, got {type(d).__name__}")
    return d


def _strings(d: Mapping[str, Any], name: str, where: str) -> tuple[str, ...]:
    values = _field(d, name, list, where, [])
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise RunSetError(f"{where}.{name}[{i}]: expected str, got {type(v).__name__}")
    return tuple(values)


def _rebased(run_id: str, work_dir: str | os.PathLike) -> str:
    """This worker's run dir of ``run_id`` (the planning worker's path means nothing on another host)."""
    return str(Path(work_dir) / run_id)


@dataclass(frozen=True)
class RunEntry:
    """One run of the run set (one suite's run dir)."""

    run_id: str
    run_dir: str
    suite: str
    framework: str | None = None
    image: str | None = None
    upstream_commit: str | None = None
    started_at: str | None = None
    window: Mapping[str, Any] | None = None
    n_trials: int = 0
    summary: str = ""
    rerun: bool = False
    variant: str | None = None  # A/B confirmation runs: "A" or "B"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["window"] = dict(self.window) if self.window is not None else None
        if self.variant is None:
            del d["variant"]
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "run") -> "RunEntry":
        d = _mapping(d, where)
        opt = {k: _field(d, k, str, where, None) for k in ("framework", "image", "upstream_commit", "started_at",
                                                           "variant")}
        return cls(run_id=_field(d, "run_id", str, where), run_dir=_field(d, "run_dir", str, where),
                   suite=_field(d, "suite", str, where), window=_field(d, "window", Mapping, where, None),
                   n_trials=_field(d, "n_trials", int, where, 0), summary=_field(d, "summary", str, where, ""),
                   rerun=_field(d, "rerun", bool, where, False), **opt)

    def rebased(self, work_dir: str | os.PathLike) -> "RunEntry":
        return dataclasses.replace(self, run_dir=_rebased(self.run_id, work_dir))


@dataclass(frozen=True)
class TrialItem:
    """One planned trial: what one mapped trial task runs."""

    run_id: str
    run_dir: str
    suite: str
    trial: Trial
    dry_run: bool = False
    policy: str | None = None
    image: str | None = None
    #: the DAG run's planned trial count and run ids (its ``[done/planned]``); None: this trial alone
    planned: int | None = None
    planned_runs: tuple[str, ...] = ()

    @property
    def trial_id(self) -> str:
        return self.trial.id

    @property
    def key(self) -> str:
        return self.trial.key

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "run_dir": self.run_dir, "suite": self.suite, "trial": self.trial.to_dict(),
                "trial_id": self.trial_id, "key": self.key, "dry_run": self.dry_run, "policy": self.policy,
                "image": self.image, "planned": self.planned, "planned_runs": list(self.planned_runs)}

    @classmethod
    def from_dict(cls, d: Any, where: str = "item") -> "TrialItem":
        d = _mapping(d, where)
        run_id, run_dir, suite = (_field(d, k, str, where) for k in ("run_id", "run_dir", "suite"))
        raw = _field(d, "trial", Mapping, where)
        try:
            trial = Trial.from_dict(dict(raw))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RunSetError(f"{where}.trial: not a planned trial ({type(exc).__name__}: {exc})") from None
        return cls(run_id=run_id, run_dir=run_dir, suite=suite, trial=trial, dry_run=_field(d, "dry_run", bool, where, False),
                   policy=_field(d, "policy", str, where, None), image=_field(d, "image", str, where, None),
                   planned=_field(d, "planned", int, where, None), planned_runs=_strings(d, "planned_runs", where))

    @classmethod
    def of(cls, item: "TrialItem | Mapping[str, Any]") -> "TrialItem":
        """``item`` itself, or read from its dict form (callers that still pass dicts)."""
        return item if isinstance(item, TrialItem) else cls.from_dict(item)

    def rebased(self, work_dir: str | os.PathLike) -> "TrialItem":
        return dataclasses.replace(self, run_dir=_rebased(self.run_id, work_dir))


@dataclass(frozen=True)
class RunSet:
    """What planning hands every later step of a scheduled run."""

    runs: tuple[RunEntry, ...]
    trials: tuple[TrialItem, ...] = ()
    trial_keys: tuple[str, ...] = ()
    dry_run: bool = False
    policy: str | None = None
    cluster: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    confirm: Mapping[str, Any] | None = None  # A/B confirmation runs: the plan (engine.abconfirm)

    def to_dict(self, trials: bool = True) -> dict[str, Any]:
        """The JSON-safe form (XCom); ``trials=False`` leaves the trial items out."""
        d: dict[str, Any] = {"runs": [r.to_dict() for r in self.runs]}
        if trials:
            d["trials"] = [i.to_dict() for i in self.trials]
        d.update(trial_keys=list(self.trial_keys), dry_run=self.dry_run, policy=self.policy, cluster=self.cluster,
                 params=dict(self.params))
        if self.confirm is not None:
            d["confirm"] = dict(self.confirm)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "RunSet":
        d = _mapping(d, "run set")
        runs = tuple(RunEntry.from_dict(r, f"run set.runs[{i}]") for i, r in
                     enumerate(_field(d, "runs", list, "run set")))
        items = tuple(TrialItem.from_dict(x, f"run set.trials[{i}]") for i, x in
                      enumerate(_field(d, "trials", list, "run set", [])))
        keys = _strings(d, "trial_keys", "run set") if "trial_keys" in d else tuple(i.key for i in items)
        return cls(runs=runs, trials=items, trial_keys=keys, dry_run=_field(d, "dry_run", bool, "run set", False),
                   policy=_field(d, "policy", str, "run set", None), cluster=_field(d, "cluster", str, "run set", None),
                   params=dict(_field(d, "params", Mapping, "run set", {})),
                   confirm=_field(d, "confirm", Mapping, "run set", None))

    @classmethod
    def of(cls, run_set: "RunSet | Mapping[str, Any]") -> "RunSet":
        """``run_set`` itself, or read from its dict form (callers that still pass dicts)."""
        return run_set if isinstance(run_set, RunSet) else cls.from_dict(run_set)

    def rebased(self, work_dir: str | os.PathLike) -> "RunSet":
        """The run set with every run's and trial item's ``run_dir`` on this worker."""
        return dataclasses.replace(self, runs=tuple(r.rebased(work_dir) for r in self.runs),
                                   trials=tuple(i.rebased(work_dir) for i in self.trials))
