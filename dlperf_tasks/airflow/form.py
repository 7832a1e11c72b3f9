"""The trigger form of a dlperf DAG: which run parameters it shows, and how.

:mod:`.params` holds every field's JSON schema (what a conf may say, checked by the plan
task and the api-server's conf guard); this module picks and dresses the subset the form
shows for one DAG (pure data; only :func:`dag_params` imports Airflow):

- internal fields are not in the form: ``confirm`` (the A/B plan a regression finding's
  follow-up run carries; still accepted in a conf);
- per-DAG fields only where they apply: ``xla`` only when a suite of the DAG has an XLA
  variant, ``image_tag`` only when a suite runs in a container (the smoke DAG has neither);
- ``adaptive`` is a choice (suite's / off / on / on with a CI width), not a free-text box;
- the everyday fields come first (Airflow's default section, open); the rest go to a
  collapsed "More options" section, so the dialog stays short. A refused conf's alert (at
  the dialog's top) is kept in view by the ``[api] theme`` of airflow.cfg.template (docs/ui.md).
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

from dlperf_tasks.airflow import params as params_mod

INTERNAL = ("confirm",)
MORE_SECTION = "More options"
#: shown in the default (open) section; every other form field goes to MORE_SECTION
EVERYDAY = ("suites", "topologies", "batch_sizes", "precisions", "xla", "trials", "dry_run")
#: the CI widths the form offers for adaptive trials (true = the default, 1 %)
ADAPTIVE_WIDTHS = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5)  # 0.5: the widest the adaptive rule takes


def applicable(suite_ids: Iterable[str]) -> set[str]:
    """Names of the per-DAG fields that apply to these suites (``xla``, ``image_tag``).
    Both when the catalog does not load (the DAG's import error says why)."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.errors import DlperfError

    try:
        suites = [load_suite(i) for i in sorted(suite_ids)]
    except DlperfError:
        return {"xla", "image_tag"}
    out = set()
    if any(any(s.xla) for s in suites):
        out.add("xla")
    if any(s.container is not None for s in suites):
        out.add("image_tag")
    return out


def _adaptive_schema() -> dict[str, Any]:
    values: list[Any] = [None, False, True, *ADAPTIVE_WIDTHS]
    display = {"null": "the suite's", "false": "off", "true": "on (stop once the median is known to 1 %)"}
    display.update({str(w): f"on, stop at a {w * 100:g} % interval" for w in ADAPTIVE_WIDTHS[1:]})
    display[str(ADAPTIVE_WIDTHS[0])] = "on, stop at a 1 % interval"
    # "number" before "boolean": Airflow's form draws the widget of the first non-null type (a select
    # for a number with an enum; a boolean would be a switch, losing "the suite's" and the widths)
    return {"type": ["null", "number", "boolean"], "enum": values, "values_display": display,
            "title": "Adaptive trials",
            "description": "Stop a cell's trials once its median is known well enough (off: run every trial); "
                           "empty = the suite's."}


def run_size_text(suite_ids: Iterable[str]) -> str:
    """The size of a run with every default, for the form to say before it is triggered: trial
    tasks, the most nodes one trial takes, and GPU-hours (at most: each trial at its timeout).
    "" when the catalog does not load."""
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.catalog.plan import Overrides, plan
    from dlperf_tasks.core.errors import DlperfError

    try:
        plans = [plan(load_suite(i), Overrides()) for i in sorted(suite_ids)]
    except DlperfError:
        return ""
    trials = [(t.trial.cell.topology, p.timeout_s) for p in plans for t in p.trials]
    if not trials:
        return ""
    nodes = max(top.nodes for top, _ in trials)
    gpu_h = sum(top.world_size * timeout for top, timeout in trials) / 3600
    return (f" Run size with every default: {len(trials)} trial(s), up to {nodes} node(s) per trial, "
            f"at most {gpu_h:.2f} GPU-hours (each trial at its timeout).")


def form_fields(suite_ids: Iterable[str], policy: str = "continue") -> dict[str, tuple[Any, dict[str, Any]]]:
    """``{name: (default, schema)}`` of the fields the form shows, in order, with the text that
    says what "empty" means for these suites appended to each description."""
    ids = sorted(suite_ids)
    schemas = params_mod.schemas(ids)
    defaults = params_mod.defaults(policy)
    shown = params_mod.suite_defaults(ids)
    choices = params_mod.form_choices(ids)
    fits = applicable(ids)
    order = [n for n in EVERYDAY if n in schemas] + [n for n in schemas if n not in EVERYDAY]
    out: dict[str, tuple[Any, dict[str, Any]]] = {}
    for name in order:
        if name in INTERNAL or (name in ("xla", "image_tag") and name not in fits):
            continue
        schema = _adaptive_schema() if name == "adaptive" else copy.deepcopy(schemas[name])
        # topologies: a free list (Airflow's form draws a string array without examples as a text
        # box, one per line: FieldSelector.tsx), checked by the pattern, not a pick among the
        # suite's topologies, so any valid topology can be asked for
        if choices.get(name) and name != "topologies":
            schema["examples"] = choices[name]
        if name not in EVERYDAY:
            schema["section"] = MORE_SECTION
        schema["description"] = schema["description"] + (f" {shown[name]}" if name in shown else "")
        if name == "trials":
            schema["description"] += run_size_text(ids)
        out[name] = (defaults[name], schema)
    return out


def dag_params(suite_ids: Iterable[str], policy: str = "continue") -> dict:
    """Airflow ``Param`` objects for the DAG's ``params=`` (the trigger form)."""
    from airflow.sdk import Param

    out = {}
    for name, (default, schema) in form_fields(suite_ids, policy).items():
        description = schema.pop("description")
        out[name] = Param(default, description=description, **schema)
    return out
