"""Normalised, read-only views of archived runs.

History code works on :class:`RunView` whether the run came from a full result JSON
(``RunView.from_result``) or from a store index entry (``RunView.from_summary``: the
``index/<suite>.json`` row with ``cells: {cell_id: {median_speed, speedup, n_valid,
trial_values, metric_kind}}`` and ``env``), so "the last N runs of a cell" needs one read.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from dlperf_tasks.history.cellspec import CellKey, CellSpecError, parse_cell_id

# Run statuses that never count as history (a run without manifest, a crashed sweep...).
BAD_STATUSES = frozenset({"failed", "incomplete", "error", "aborted", "broken"})
# Keys of run metadata that take part in the environment diff besides ``run.env``.
RUN_ENV_KEYS = ("image", "image_digest", "upstream_commit")


def _floats(values: Iterable[Any]) -> list[float]:
    out = []
    for v in values or []:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if f == f and f not in (float("inf"), float("-inf")):
            out.append(f)
    return out


#: a cell whose speed is the job's tokens/s (an LLM cell) is judged per GPU: its figure is tokens/s/GPU
PER_GPU_UNITS = {"tokens/s": "tokens/s/GPU"}


def _per_gpu(c: Mapping[str, Any], values: list[float], median: float | None, unit: str):
    """(values, median, unit) per GPU for a cell whose unit is in :data:`PER_GPU_UNITS` and that
    names its GPU count; else as given. Within one cell the GPU count is fixed, so ratios (the
    regression check's, the compare's) are the same; the figure is the one LLM teams quote."""
    gpus = c.get("gpus")
    if unit not in PER_GPU_UNITS or not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        return values, median, unit
    return [v / gpus for v in values], (median / gpus if median is not None else None), PER_GPU_UNITS[unit]


@dataclass(frozen=True)
class CellView:
    cell_id: str
    values: tuple[float, ...]  # valid trial speeds
    median: float | None
    speedup: float | None = None
    metric_kind: str = "throughput"
    unit: str = "samples/s"
    model: str | None = None
    n_valid: int = 0
    n_invalid: int = 0

    @property
    def key(self) -> CellKey:
        return parse_cell_id(self.cell_id)

    @property
    def higher_is_better(self) -> bool:
        return self.metric_kind != "latency"

    @classmethod
    def from_result_cell(cls, c: Mapping[str, Any]) -> "CellView":
        values = c.get("values")
        if values is None:
            values = [t.get("value") for t in c.get("trials", []) if t.get("status") == "OK"]
        vals = _floats(values)
        med = c.get("median_speed")
        vals, median, unit = _per_gpu(c, vals, float(med) if med is not None else (
            statistics.median(vals) if vals else None),
            c.get("unit") or ("ms/iter" if c.get("metric_kind") == "latency" else "samples/s"))
        return cls(
            cell_id=c["cell_id"], values=tuple(vals), median=median,
            speedup=c.get("speedup"), metric_kind=c.get("metric_kind") or "throughput", unit=unit,
            model=c.get("model"), n_valid=int(c.get("n_valid", len(vals))), n_invalid=int(c.get("n_invalid") or 0),
        )

    @classmethod
    def from_summary_cell(cls, cell_id: str, c: Mapping[str, Any]) -> "CellView":
        vals = _floats(c.get("trial_values") or c.get("values") or [])
        med = c.get("median_speed")
        kind = c.get("metric_kind") or "throughput"
        vals, median, unit = _per_gpu(c, vals, float(med) if med is not None else (
            statistics.median(vals) if vals else None), c.get("unit") or ("ms/iter" if kind == "latency" else "samples/s"))
        return cls(
            cell_id=cell_id, values=tuple(vals), median=median,
            speedup=c.get("speedup"), metric_kind=kind, unit=unit,
            model=c.get("model"), n_valid=int(c.get("n_valid", len(vals)) or 0),
            n_invalid=int(c.get("n_invalid") or 0),
        )


@dataclass(frozen=True)
class RunView:
    run_id: str
    suite: str
    date: str  # YYYY-MM-DD
    started_at: str | None
    status: str
    env: dict[str, Any]
    cells: dict[str, CellView] = field(default_factory=dict)
    framework: str | None = None
    path: str | None = None

    @property
    def valid(self) -> bool:
        return (self.status or "").lower() not in BAD_STATUSES

    @property
    def sort_key(self) -> tuple:
        return (self.started_at or self.date or "", self.run_id)

    @classmethod
    def from_result(cls, result: Mapping[str, Any], status: str = "ok") -> "RunView":
        run = result.get("run") or {}
        env = flat_env(run)
        cells = {}
        for c in result.get("cells", []):
            try:
                cells[c["cell_id"]] = CellView.from_result_cell(c)
            except (KeyError, CellSpecError):
                continue
        started = run.get("started_at")
        return cls(run_id=str(run.get("run_id")), suite=str(run.get("suite")), date=(started or "")[:10],
                   started_at=started, status=status, env=env, cells=cells, framework=run.get("framework"))

    @classmethod
    def from_summary(cls, s: Mapping[str, Any]) -> "RunView":
        cells = {cid: CellView.from_summary_cell(cid, c) for cid, c in (s.get("cells") or {}).items()}
        env_src = s.get("env") or {}
        if isinstance(env_src.get("env"), Mapping) or any(k in env_src for k in RUN_ENV_KEYS):
            run_like = env_src  # store index: env = {image, image_digest, upstream_commit, ..., env: {...}}
        else:
            run_like = {k: s.get(k) for k in RUN_ENV_KEYS} | {"env": env_src}
        env = flat_env(run_like)
        started = s.get("started_at")
        return cls(run_id=str(s.get("run_id")), suite=str(s.get("suite")),
                   date=str(s.get("date") or (started or "")[:10]), started_at=started,
                   status=str(s.get("status") or "ok"), env=env, cells=cells,
                   framework=s.get("framework"), path=s.get("path"))


def flat_env(run: Mapping[str, Any]) -> dict[str, Any]:
    """``run.env`` flattened to dotted keys plus image/image_digest/upstream_commit."""
    out: dict[str, Any] = {}

    def walk(prefix: str, obj: Any) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(obj, (list, tuple)):
            out[prefix] = ", ".join(str(x) for x in obj)
        else:
            out[prefix] = obj

    walk("", run.get("env") or {})
    for k in RUN_ENV_KEYS:
        if run.get(k) is not None:
            out[k] = run.get(k)
    return out


def env_diff(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{key: {"baseline": old, "current": new}}`` for every key whose value differs."""
    out = {}
    for k in sorted(set(baseline) | set(current)):
        a, b = baseline.get(k), current.get(k)
        if a != b:
            out[k] = {"baseline": a, "current": b}
    return out


def sort_runs(runs: Iterable[RunView]) -> list[RunView]:
    return sorted(runs, key=lambda r: r.sort_key)


# the flattened env keys (last dotted part) that say which machine a run ran on
MACHINE_KEYS = frozenset({"gpu_model", "driver", "cpu", "cpu_count", "kernel", "platform", "runtime"})


def machine_of(env: Mapping[str, Any]) -> tuple:
    """What identifies the machine in a run's flattened env (empty when nothing was captured):
    runs with equal tuples ran on the same kind of machine (node names are redacted per run)."""
    return tuple(sorted((k, str(v)) for k, v in env.items() if k.rsplit(".", 1)[-1] in MACHINE_KEYS))
