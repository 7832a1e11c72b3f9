"""The run form of every dlperf DAG: JSON-schema Params, and the same checks in code.

The Airflow UI renders :func:`dag_params` as a form; the REST API and ``dag.test()``
pass a ``conf`` dict. Airflow validates a conf against the schemas, and the first task
(``plan``) calls :func:`validate_conf` again, so a bad value fails the run before any
node is touched, with a message naming the field. Every string is constrained by an
enum or a strict pattern, so nothing from the form can carry shell syntax; the code
check also rejects shell metacharacters explicitly and unknown fields.

Empty lists / null mean "the suite's default" (from its catalog YAML).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Iterable, Mapping

from dlperf_tasks.errors import PlanError

TOPOLOGY_PATTERN = r"^[1-9][0-9]*n[1-9][0-9]*g$"
# A docker tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127} (the registry's own rule)
IMAGE_TAG_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
PRECISIONS = ["fp32", "amp"]
POLICIES = ["continue", "fail_fast"]
_SHELL_META = re.compile(r"[;&|`$<>(){}\[\]\\'\"*?!#~\s]|\.\.")


class ParamsError(PlanError):
    """A run parameter is invalid; the message starts with the field name."""


def schemas(suite_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """JSON schema of each field (pure data: also used by tests and the docs)."""
    ids = sorted(suite_ids)
    return {
        "suites": {
            "type": "array", "items": {"type": "string", "enum": ids}, "uniqueItems": True,
            "title": "Suites", "description": "Suites (model benchmarks) to run; empty = all of this DAG's suites.",
            "examples": ids,
        },
        "batch_sizes": {
            "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 4096}, "uniqueItems": True,
            "title": "Batch sizes per device", "description": "e.g. [32, 64]; empty = the suite's.",
        },
        "precisions": {
            "type": "array", "items": {"type": "string", "enum": PRECISIONS}, "uniqueItems": True,
            "title": "Precisions", "description": "fp32 and/or amp (fp16 mixed precision); empty = the suite's.",
            "examples": PRECISIONS,
        },
        "topologies": {
            "type": "array", "items": {"type": "string", "pattern": TOPOLOGY_PATTERN, "maxLength": 16},
            "uniqueItems": True, "title": "Topologies",
            "description": "<nodes>n<gpus per node>g, e.g. [\"1n1g\", \"1n8g\", \"2n8g\"]; empty = the suite's.",
        },
        "xla": {
            "type": ["null", "string"], "enum": [None, "off", "on", "both"],
            "title": "XLA", "description": "TensorFlow only: off, on or both; empty = the suite's.",
        },
        "trials": {
            "type": ["null", "integer"], "minimum": 1, "maximum": 20,
            "title": "Trials per cell", "description": "Runs of each cell (DLPerf: 5-7); empty = the suite's.",
        },
        "warmup_iters": {
            "type": ["null", "integer"], "minimum": 0, "maximum": 100000,
            "title": "Warm-up iterations", "description": "Iterations dropped before measuring (DLPerf: 20).",
        },
        "measure_iters": {
            "type": ["null", "integer"], "minimum": 1, "maximum": 100000,
            "title": "Measured iterations", "description": "Iterations averaged for a trial's speed (DLPerf: 100).",
        },
        "image_tag": {
            "type": ["null", "string"], "pattern": IMAGE_TAG_PATTERN, "maxLength": 128,
            "title": "Image tag override", "description": "Replaces the tag of the suite's container image, e.g. 20.03-py3.",
        },
        "dry_run": {
            "type": "boolean", "title": "Dry run",
            "description": "Plan and print the trials and commands, run nothing on the cluster.",
        },
        "policy": {
            "type": "string", "enum": POLICIES, "title": "Failure policy",
            "description": "continue: record failed/invalid trials and go on; fail_fast: stop the run at the first one.",
        },
    }


def defaults(policy: str = "continue") -> dict[str, Any]:
    return {"suites": [], "batch_sizes": [], "precisions": [], "topologies": [], "xla": None, "trials": None,
            "warmup_iters": None, "measure_iters": None, "image_tag": None, "dry_run": False, "policy": policy}


def dag_params(suite_ids: Iterable[str], policy: str = "continue") -> dict:
    """Airflow ``Param`` objects for the DAG's ``params=`` (the UI form)."""
    from airflow.sdk import Param

    defs = defaults(policy)
    out = {}
    for name, schema in schemas(suite_ids).items():
        schema = copy.deepcopy(schema)
        description = schema.pop("description")
        out[name] = Param(defs[name], description=description, **schema)
    return out


def _where(path) -> str:
    name = ""
    for p in path:
        name += f"[{p}]" if isinstance(p, int) else (f".{p}" if name else str(p))
    return name


def _strings(value, path):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, [*path, i])


def validate_conf(conf: Mapping[str, Any] | None, suite_ids: Iterable[str], policy: str = "continue") -> dict[str, Any]:
    """Check a run's params/conf; return the full, normalised dict. Raises :class:`ParamsError`."""
    import jsonschema

    conf = dict(conf or {})
    field_schemas = schemas(suite_ids)
    unknown = sorted(set(conf) - set(field_schemas))
    if unknown:
        raise ParamsError(f"{unknown[0]}: unknown field (known: {', '.join(field_schemas)})")
    out = defaults(policy)
    for name, schema in field_schemas.items():
        if name not in conf:
            continue
        value = conf[name]
        for path, text in _strings(value, [name]):
            if _SHELL_META.search(text) or any(ord(c) < 32 or ord(c) == 127 for c in text):
                raise ParamsError(f"{_where(path)}: {text!r} contains characters that are not allowed "
                                  "(shell syntax, quotes, spaces or control characters)")
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as exc:
            raise ParamsError(f"{_where([name, *exc.absolute_path])}: {exc.message}") from None
        out[name] = value
    return out
