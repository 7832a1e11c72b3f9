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

from dlperf_tasks.catalog import overrides
from dlperf_tasks.core.errors import PlanError, PlanTooLargeError

# at most 9999 nodes and 99 GPUs per node: "99999999999n8g" (it fit maxLength 16) used to plan for GBs
TOPOLOGY_PATTERN = r"^[1-9][0-9]{0,3}n[1-9][0-9]?g$"
MAX_LIST = 16  # items in batch_sizes / topologies (1..4096 x 20 trials used to map 491,520 tasks)
DEFAULT_MAX_MAP_LENGTH = 1024  # Airflow's default [core] max_map_length
# A docker tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127} (the registry's own rule)
IMAGE_TAG_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
BATCH_PATTERN = r"^[1-9][0-9]{0,3}$"  # a batch size the form sends as text ("32")
PRECISIONS = list(overrides.PRECISIONS)  # what a run may ask for (a suite without one refuses it)
POLICIES = ["continue", "fail_fast"]
_SHELL_META = re.compile(r"[;&|`$<>(){}\[\]\\'\"*?!#~\s]|\.\.")


class ParamsError(PlanError):
    """A run parameter is invalid; the message starts with the field name."""


def schemas(suite_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """JSON schema of each field (pure data: also used by tests and the docs)."""
    ids = sorted(suite_ids)
    return {
        "suites": {
            "type": ["null", "array"], "items": {"type": "string", "enum": ids}, "uniqueItems": True,
            "maxItems": max(1, len(ids)),
            "title": "Suites", "description": "Suites (model benchmarks) to run; empty = all of this DAG's suites.",
            "examples": ids,
        },
        "batch_sizes": {
            # digit strings too: the form's multi-select (the widget of every list field) sends strings
            "type": ["null", "array"], "items": {"type": ["integer", "string"], "minimum": 1, "maximum": 4096,
                                                  "pattern": BATCH_PATTERN},
            "uniqueItems": True, "maxItems": MAX_LIST,
            "title": "Batch sizes per device", "description": "e.g. [32, 64]; empty = the suite's.",
        },
        "precisions": {
            "type": ["null", "array"], "items": {"type": "string", "enum": PRECISIONS}, "uniqueItems": True,
            "maxItems": len(PRECISIONS), "title": "Precisions",
            "description": "fp32, amp (fp16 mixed precision), bf16 or fp8 (those the suites have); empty = the suite's.",
            "examples": PRECISIONS,
        },
        "topologies": {
            "type": ["null", "array"], "items": {"type": "string", "pattern": TOPOLOGY_PATTERN, "maxLength": 8},
            "uniqueItems": True, "maxItems": MAX_LIST, "title": "Topologies",
            "description": "One per line, <nodes>n<gpus per node>g, any the cluster holds (e.g. 1n8g, 3n4g); "
                           "empty = the suite's.",
        },
        "xla": {
            "type": ["null", "string"], "enum": [None, "off", "on", "both"],
            "values_display": {"null": "the suite's", "off": "off", "on": "on", "both": "both (off and on)"},
            "title": "XLA", "description": "TensorFlow only: off, on or both; empty = the suite's.",
        },
        "trials": {
            "type": ["null", "integer"], "minimum": 1, "maximum": 20,
            "title": "Trials per cell", "description": "Runs of each cell; empty = the suite's.",
        },
        "warmup_iters": {
            "type": ["null", "integer"], "minimum": 0, "maximum": 100000,
            "title": "Warm-up iterations", "description": "Iterations dropped before measuring; empty = the suite's.",
        },
        "measure_iters": {
            "type": ["null", "integer"], "minimum": 1, "maximum": 100000,
            "title": "Measured iterations",
            "description": "Iterations averaged for a trial's speed; empty = the suite's.",
        },
        "image_tag": {
            "type": ["null", "string"], "pattern": IMAGE_TAG_PATTERN, "maxLength": 128,
            "title": "Image tag override", "description": "Replaces the tag of the suite's container image, e.g. 20.03-py3.",
        },
        "dry_run": {
            "type": ["null", "boolean"], "title": "Dry run",
            "description": "Plan and print the trials and commands, run nothing on the cluster.",
        },
        "policy": {
            "type": ["null", "string"], "enum": [None, *POLICIES], "title": "Failure policy",
            "values_display": {"null": "the [dlperf] policy", "continue": "continue", "fail_fast": "fail_fast"},
            "description": "continue: record failed/invalid trials and go on; fail_fast: stop the run at the first one.",
        },
        # adaptive trials and node health in the DAG (docs/decisions.md; dlperf_tasks/engine/decisions.py, abconfirm.py)
        "adaptive": {
            "type": ["null", "boolean", "number"], "exclusiveMinimum": 0, "maximum": 0.5, "title": "Adaptive trials",
            "description": "true or a CI width (0.01 = 1 %): stop a cell's trials once its median is known; "
                           "empty = the suite's.",
        },
        "quarantine": {
            "type": ["null", "boolean"], "title": "Quarantine suspect nodes",
            "description": "Keep nodes node health names out of later trials (dlperf cluster clear NODE); "
                           "empty = the suite's.",
        },
        "confirm": {**_confirm_schema(), "title": "A/B confirmation",
                    "description": "Set by the follow-up run a regression finding triggers; leave empty."},
    }


def _confirm_schema() -> dict[str, Any]:
    from dlperf_tasks.history.confirm import CONF_SCHEMA

    return copy.deepcopy(CONF_SCHEMA)


def defaults(policy: str = "continue") -> dict[str, Any]:
    return {"suites": [], "batch_sizes": [], "precisions": [], "topologies": [], "xla": None, "trials": None,
            "warmup_iters": None, "measure_iters": None, "image_tag": None, "dry_run": False, "policy": policy,
            "adaptive": None, "quarantine": None, "confirm": None}


def form_choices(suite_ids: Iterable[str]) -> dict[str, list]:
    """The options the form offers for the list fields without a fixed set (batch sizes and
    topologies): the values of this DAG's suites. With ``examples`` Airflow's form draws every
    list field as the same multi-select (suites and precisions have theirs); other values go
    in the conf JSON. ``{}`` when the catalog does not load."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.errors import DlperfError

    try:
        suites = [load_suite(i) for i in sorted(suite_ids)]
    except DlperfError:
        return {}
    tops = {t.name: (t.nodes * t.gpus_per_node, t.nodes) for s in suites for t in s.topologies}
    return {"batch_sizes": sorted({b for s in suites for b in s.batch_sizes}),
            "topologies": sorted(tops, key=lambda n: (tops[n], n))}


def suite_defaults(suite_ids: Iterable[str]) -> dict[str, str]:
    """Per form field, the text that shows what "empty" means for this DAG's suites (from their
    catalog YAMLs), and under ``trials`` how many trial tasks a run plans with those defaults
    (cells x trials per suite). ``{}`` when the catalog does not load (the DAG's import error
    says why)."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.errors import DlperfError
    from dlperf_tasks.catalog.plan import Overrides, plan

    try:
        suites = [load_suite(i) for i in sorted(suite_ids)]
        counts = {s.id: plan(s, Overrides()) for s in suites}
    except DlperfError:
        return {}

    def each(fn) -> str:
        return "; ".join(f"{s.id}: {fn(s)}" for s in suites)

    total = sum(len(p.trials) for p in counts.values())
    return {
        "batch_sizes": "Suite defaults: " + each(lambda s: ", ".join(map(str, s.batch_sizes)) or "its layouts"),
        "precisions": "Suite defaults: " + each(lambda s: ", ".join(s.precisions)),
        "topologies": "Suite defaults: " + each(lambda s: ", ".join(t.name for t in s.topologies)),
        "xla": "Suite defaults: " + each(lambda s: "/".join("on" if x else "off" for x in s.xla)),
        "trials": "Suite defaults: " + each(lambda s: str(s.trials)) + f". With every default a run plans {total} "
                  "trial task(s) (" + "; ".join(f"{i}: {len(p.cells)} cells, {len(p.trials)} trials"
                                                  for i, p in counts.items())
                  + "); a conf plans cells (batch sizes x precisions x topologies) x trials per suite, and the "
                    "plan task's log lists them.",
        "warmup_iters": "Suite defaults: " + each(lambda s: str(s.window.warmup)),
        "measure_iters": "Suite defaults: " + each(lambda s: str(s.window.measure)),
    }


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
    out = check_fields(conf, suite_ids, policy)
    check_map_length(out, suite_ids)
    return out


def check_fields(conf: Mapping[str, Any] | None, suite_ids: Iterable[str], policy: str = "continue") -> dict[str, Any]:
    """:func:`validate_conf` without the plan-size check: each field against its schema."""
    import jsonschema

    conf = dict(conf or {})
    field_schemas = schemas(suite_ids)
    unknown = sorted(set(conf) - set(field_schemas))
    if unknown:
        raise ParamsError(f"{unknown[0]}: unknown field (known: {', '.join(field_schemas)})")
    if isinstance(conf.get("batch_sizes"), list):
        conf["batch_sizes"] = _batch_ints(conf["batch_sizes"])
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
        out[name] = value if value is not None else out[name]  # empty (null) = the default
    return out


def _batch_ints(values: list) -> list:
    """The form's multi-select sends ``["32", "64"]``: digit strings become integers (anything
    else is left for the schema check to name)."""
    return [int(v) if isinstance(v, str) and re.fullmatch(BATCH_PATTERN, v) else v for v in values]


def max_map_length() -> int | None:
    """Airflow's ``[core] max_map_length`` when running inside Airflow (its config already
    imported), else None: pure callers (CLI, unit tests) never import Airflow for this."""
    import sys

    if "airflow.configuration" not in sys.modules:
        return None
    from airflow.configuration import conf

    return conf.getint("core", "max_map_length", fallback=DEFAULT_MAX_MAP_LENGTH)


def plan_suites(params: Mapping[str, Any], suite_ids: Iterable[str], limit: int | None = None) -> dict[str, Any]:
    """Each suite of the run (``params["suites"]``, else ``suite_ids``) planned with ``params``, at
    most ``limit`` trials each: suite id -> its Plan, or the DlperfError that planning raised."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.errors import DlperfError
    from dlperf_tasks.catalog.plan import MAX_PLAN_TRIALS, Overrides, plan

    out: dict[str, Any] = {}
    for suite_id in params.get("suites") or sorted(suite_ids):
        try:
            out[suite_id] = plan(load_suite(suite_id), Overrides.from_params(params),
                                 max_trials=MAX_PLAN_TRIALS if limit is None else limit)
        except DlperfError as exc:
            out[suite_id] = exc
    return out


def check_map_length(params: Mapping[str, Any], suite_ids: Iterable[str], limit: int | None = None,
                     plans: Mapping[str, Any] | None = None) -> None:
    """Refuse a run whose plans would map more trial tasks than ``limit`` (default: Airflow's
    max_map_length), naming the fields; sizes are checked before anything is expanded
    (``plan.plan(max_trials=...)``). ``plans``: :func:`plan_suites` with this limit, when the
    caller planned already. Suites that do not plan are left to the plan step's error."""
    from dlperf_tasks.core.errors import DlperfError

    limit = limit if limit is not None else max_map_length()
    if limit is None:
        return
    counts: dict[str, int] = {}
    for suite_id, p in (plans if plans is not None else plan_suites(params, suite_ids, limit)).items():
        if isinstance(p, PlanTooLargeError):
            raise ParamsError(f"batch_sizes/precisions/xla/topologies/trials: suite {suite_id}: {p} "
                              f"([core] max_map_length = {limit})")
        if not isinstance(p, DlperfError):
            counts[suite_id] = len(p.trials)
    total = sum(counts.values())
    if total > limit:
        per = ", ".join(f"{k} {v}" for k, v in counts.items())
        raise ParamsError(f"suites/batch_sizes/precisions/xla/topologies/trials: this run maps {total} trial tasks "
                          f"({per}), more than [core] max_map_length = {limit}; choose fewer suites, batch_sizes, "
                          f"topologies or trials")


def precheck(group: str, conf: Mapping[str, Any] | None, settings) -> str | None:
    """What the plan task would refuse, checked when a run is triggered (the api-server's
    :mod:`.conf_guard`): unknown fields, bad values, plans too large, a topology the cluster
    cannot hold. Returns the error (as the plan task words it) or None. Nothing is written and
    no node is touched; a catalog that does not load is left to the plan task. Each suite is
    planned once (:func:`plan_suites`) for both the plan-size and the topology check."""
    from dlperf_tasks.catalog.loader import suites_by_group
    from dlperf_tasks.engine.errors import NonRetriable
    from dlperf_tasks.engine.clusterconf import check_fits
    from dlperf_tasks.core.errors import DlperfError

    try:
        groups, _ = suites_by_group()
    except DlperfError:
        return None
    if group not in groups:
        return None
    suite_ids = sorted(s.id for s in groups[group])
    limit = max_map_length()
    try:
        params = check_fields(conf, suite_ids, settings.policy)
        plans = plan_suites(params, suite_ids, limit)
        check_map_length(params, suite_ids, limit, plans)
    except ParamsError as exc:
        return f"invalid run parameter {exc}"
    topologies = set()
    for suite_id, p in plans.items():
        if isinstance(p, DlperfError):
            return f"suite {suite_id}: {p}"
        topologies |= {c.topology for c in p.cells}
    try:
        check_fits(sorted(topologies), settings)
    except (NonRetriable, DlperfError) as exc:
        return str(exc)
    return None
