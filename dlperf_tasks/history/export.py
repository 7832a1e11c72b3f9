"""Downloads of one run: its trials as rows, as CSV or Parquet (pandas/pyarrow).

One row per trial: run_id, suite, cell_id, model, topology, nodes, gpus, batch_size,
precision, unit, trial, status, valid, value, reason, cell median/speedup/cv.
"""

from __future__ import annotations

import io
from typing import Any, Mapping

from dlperf_tasks.history.fmt import to_csv

COLUMNS = ["run_id", "suite", "cell_id", "model", "topology", "nodes", "gpus", "batch_size", "precision",
           "unit", "trial", "status", "valid", "value", "reason", "cell_median", "cell_speedup", "cell_cv"]


def trial_rows(result: Mapping[str, Any]) -> list[dict]:
    run = result.get("run") or {}
    rows = []
    for c in result.get("cells", []):
        for t in c.get("trials") or []:
            v = t.get("value")
            rows.append({"run_id": run.get("run_id"), "suite": run.get("suite"), "cell_id": c.get("cell_id"),
                         "model": c.get("model"), "topology": c.get("topology"), "nodes": c.get("nodes"),
                         "gpus": c.get("gpus"), "batch_size": c.get("batch_size_per_device"),
                         "precision": c.get("precision"), "unit": c.get("unit"), "trial": t.get("index"),
                         "status": t.get("status"), "valid": bool(t.get("valid")),
                         "value": v if isinstance(v, (int, float)) else None, "reason": t.get("reason") or "",
                         "cell_median": c.get("median_speed"), "cell_speedup": c.get("speedup"),
                         "cell_cv": c.get("cv")})
    return rows


def run_csv(result: Mapping[str, Any]) -> str:
    return to_csv(trial_rows(result), COLUMNS) + "\n"


def run_parquet(result: Mapping[str, Any]) -> bytes:
    import pandas as pd

    df = pd.DataFrame(trial_rows(result), columns=COLUMNS)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()
