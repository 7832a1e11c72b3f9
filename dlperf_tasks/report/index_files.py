"""Per-run index files in the Paddle benchmark convention (seed 001's ``logs/index/``).

Seed 001's script contract (``run_benchmark.sh sp|mp <batch> <fp32|fp16> <max_iter>``) ends with
``analysis_log.py <log> <index_file>``, which writes one JSON file per run named
``<model>_<sp|mp>_bs<B>_<fp>_<gpus>_speed`` (e.g. ``nlp_modelName_sp_bs32_fp32_1_speed``) that
their database ingests. dlperf writes one such file per cell beside its own result JSON (the
store publishes it under ``logs/index/``), the speed being DLPerf's cell median.

Keys (the convention's names, plus a few of ours in lower case):
``log_file``, ``model_name``, ``mission_name``, ``direction_id`` (0 CV, 1 NLP), ``run_mode``
(``sp`` = one GPU, ``mp`` = several), ``index`` (1 = speed), ``gpu_num``, ``batch_size``,
``fp_item``, ``FINAL_RESULT`` (the speed; latency in ms for Megatron cells), ``UNIT``,
``JOB_FAIL_FLAG`` (1 when no trial of the cell is valid), ``frame_version``, ``frame_commit``;
ours: ``cell_id``, ``gradient_accumulation_steps``, ``n_valid``, ``n_invalid``, ``trial_values``,
``run_id``.

A cell swept "without gradient accumulation" (accumulation 1 in a suite that sweeps it, seed 001's
"no GradAcc" rows) is named ``<model>_without_gradacc`` like the seed's log files, so its file
never overwrites the accumulated cell's.

Engine contract: ``write_index_files(result, out_dir) -> list[Path]`` (the run dir's
``logs/index`` is a good ``out_dir``); pure (reads only the result dict), atomic per file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

INDEX_DIR = "logs/index"
_NLP = ("bert", "gpt", "transformer")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _unit(cell: Mapping[str, Any]) -> str:
    if cell.get("metric_kind") == "latency":
        return "ms/iter"
    model = str(cell.get("model", "")).lower()
    if any(k in model for k in _NLP):
        return "sequences/s"
    if any(k in model for k in ("resnet", "rn50", "vgg", "mobilenet")):
        return "images/s"
    return str(cell.get("unit") or "samples/s")


def _accumulation(cell: Mapping[str, Any]) -> int | None:
    acc = (cell.get("cell") or {}).get("accumulation")
    return int(acc) if acc is not None else None


def _model_name(cell: Mapping[str, Any]) -> str:
    base = _SAFE.sub("_", str(cell.get("model") or cell.get("suite") or "model")).replace("-", "_")
    layout = (cell.get("cell") or {}).get("layout") or {}
    if layout.get("case"):
        base += "_" + _SAFE.sub("_", str(layout["case"]))
    if cell.get("xla"):
        base += "_xla"
    if _accumulation(cell) == 1:
        base += "_without_gradacc"
    return base


def _frame_version(run: Mapping[str, Any]) -> str:
    nodes = ((run.get("env") or {}).get("nodes") or {})
    for facts in nodes.values() if isinstance(nodes, dict) else ():
        v = isinstance(facts, dict) and facts.get("framework_version")
        if v and v != "absent":
            return str(v)
    return str(run.get("image") or "")


def index_name(cell: Mapping[str, Any]) -> str:
    fp = "fp16" if cell.get("precision") == "amp" else str(cell.get("precision") or "fp32")
    mode = "sp" if int(cell.get("gpus") or 1) == 1 else "mp"
    return f"{_model_name(cell)}_{mode}_bs{cell.get('batch_size_per_device')}_{fp}_{cell.get('gpus')}_speed"


def index_docs(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{file name: document}`` for every cell of ``result`` (no I/O)."""
    run = result.get("run") or {}
    docs: dict[str, dict[str, Any]] = {}
    for cell in result.get("cells") or []:
        name = index_name(cell)
        if name in docs:  # two cells that differ only in something the convention cannot say
            acc = _accumulation(cell)
            name = name[: -len("_speed")] + (f"_ga{acc}" if acc is not None else f"_{len(docs)}") + "_speed"
        trials = cell.get("trials") or []
        n_valid = int(cell.get("n_valid") or 0)
        speed = cell.get("median_speed") if n_valid else 0
        docs[name] = {
            "log_file": next((t.get("log") for t in trials if t.get("valid")), trials[0].get("log") if trials else ""),
            "model_name": name[: -len("_speed")],
            "mission_name": "语义表示" if _unit(cell) == "sequences/s" else str(cell.get("model") or ""),
            "direction_id": 1 if _unit(cell) in ("sequences/s", "ms/iter") else 0,
            "run_mode": "sp" if int(cell.get("gpus") or 1) == 1 else "mp",
            "index": 1,
            "gpu_num": cell.get("gpus"),
            "batch_size": cell.get("batch_size_per_device"),
            "fp_item": "fp16" if cell.get("precision") == "amp" else cell.get("precision"),
            "FINAL_RESULT": speed if speed is not None else 0,
            "UNIT": _unit(cell),
            "JOB_FAIL_FLAG": 0 if n_valid else 1,
            "frame_version": _frame_version(run),
            "frame_commit": run.get("upstream_commit") or "",
            "cell_id": cell.get("cell_id"),
            "gradient_accumulation_steps": _accumulation(cell),
            "n_valid": n_valid,
            "n_invalid": int(cell.get("n_invalid") or 0),
            "trial_values": [t.get("value") for t in trials if t.get("valid")],
            "run_id": run.get("run_id"),
        }
    return docs


def write_index_files(result: Mapping[str, Any], out_dir: Path | str) -> list[Path]:
    """Write one index file per cell into ``out_dir``; returns the paths (sorted by name)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, doc in sorted(index_docs(result).items()):
        path = out / name
        tmp = out / f".{name}.tmp"
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        paths.append(path)
    return paths


__all__ = ["INDEX_DIR", "index_docs", "index_name", "write_index_files"]
