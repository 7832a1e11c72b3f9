"""Results as a pandas DataFrame (one row per run x cell) and Parquet export.

Columns: run_id, date, status, suite, cell_id, topology, nodes, gpus, batch_size, precision,
metric_kind, unit, median, speedup, n_valid, n_invalid, trial_values (list of floats) and one
``env.<key>`` column per environment key found.
"""

from __future__ import annotations

import os
from typing import Iterable

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.history.runs import RunView, sort_runs


def runs_frame(runs: Iterable[RunView]):
    import pandas as pd

    rows = []
    for r in sort_runs(runs):
        for cid, c in sorted(r.cells.items()):
            k = c.key
            row = {"run_id": r.run_id, "date": r.date, "status": r.status, "suite": r.suite, "cell_id": cid,
                   "topology": k.topology, "nodes": k.nodes, "gpus": k.gpus, "batch_size": k.batch_size,
                   "precision": k.precision, "metric_kind": c.metric_kind, "unit": c.unit, "median": c.median,
                   "speedup": c.speedup, "n_valid": c.n_valid, "n_invalid": c.n_invalid,
                   "trial_values": list(c.values)}
            row.update({f"env.{ek}": (None if ev is None else str(ev)) for ek, ev in r.env.items()})
            rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty:
        df["date"] = pd.to_datetime(df["date"], errors="coerce")
    return df


def write_parquet(runs: Iterable[RunView], path: str | os.PathLike) -> int:
    """Write the frame to ``path`` (Parquet, via pyarrow). Returns the number of rows."""
    df = runs_frame(runs)
    if df.empty:
        raise DlperfError("nothing to export: no runs matched")
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)
    df.to_parquet(path, index=False)
    return len(df)
