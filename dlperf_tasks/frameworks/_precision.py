"""The precision a log says its run trained in, against the cell (issue 24: a launch of another
precision must not pass as the cell's number).

Read from the run's own arguments as the log prints them (``LogFacts.args``): MXNet's ``dtype``
(gluon-nlp / gluon-cv Namespace line: a NumPy dtype name, ``float16`` = AMP), tensorflow/models'
``--dtype`` (fp16|bf16|fp32) on the command line in the log, DLE's ``fp16`` / ``amp`` (PARAMETER
Config line). A log that does not say is not judged on it.
"""

from __future__ import annotations

from dlperf_tasks.core.model import Cell

#: NumPy dtype names MXNet's cast takes, and tensorflow/models' --dtype enum -> the precision trained
NUMPY_FLOATS = {"float16": "amp", "half": "amp", "float32": "fp32", "single": "fp32", "float64": "fp64",
                "double": "fp64", "float": "fp64"}
TF_DTYPES = {"fp16": "amp", "bf16": "bf16", "fp32": "fp32"}
_TRUE = ("true", "1")


def _arg(args: dict, key: str) -> str | None:
    v = args.get(key)
    return None if v is None else str(v).strip().strip("'\"")


def log_precision(family: str, args: dict) -> tuple[str | None, str]:
    """``(precision, what the log said)``; precision None when the log does not say."""
    if family in ("mxnet", "tensorflow"):
        dtype = _arg(args, "dtype")
        if dtype is None:
            return None, ""
        table = NUMPY_FLOATS if family == "mxnet" else TF_DTYPES
        return table.get(dtype, dtype), f"dtype={dtype}"
    if family == "dle":
        flags = {k: v for k in ("fp16", "amp") if (v := _arg(args, k)) is not None}
        if not flags:
            return None, ""
        amp = any(v.lower() in _TRUE for v in flags.values())
        return ("amp" if amp else "fp32"), ", ".join(f"{k}={v}" for k, v in flags.items())
    return None, ""


def precision_problems(family: str, facts, cell: Cell) -> list[str]:
    """A reason when the log's own arguments trained another precision than the cell's."""
    prec, said = log_precision(family, facts.args or {})
    want = cell.precision
    if prec is None or want not in ("amp", "fp32") or prec == want:
        return []
    src = f" ({facts.args_source})" if facts.args_source else ""
    return [f"log's {said}{src} trains {prec}, the cell's precision is {want}"]
