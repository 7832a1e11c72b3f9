"""Check a parsed suite YAML and build a :class:`Suite` from it.

Shape (types, required keys, unknown keys) is checked with the JSON Schema in
catalog/schema.py; meaning (Megatron arithmetic, topology strings, known framework,
values safe to reach a shell...) is checked here and in catalog/fieldchecks.py. Every problem is
reported as ``<file>:<line>: <key path>: <what is wrong>`` (catalog/problems.py); all problems of a
file are reported at once.
"""

from __future__ import annotations

from typing import Any

from dlperf_tasks.catalog.fieldchecks import check_container, check_image_ref, check_plain_strings, check_upstream, env_of
from dlperf_tasks.catalog.model import ContainerSpec, Patch, Suite, Upstream
from dlperf_tasks.catalog.patches import check_patches
from dlperf_tasks.catalog.problems import Problems, no_dupes, topology_at
from dlperf_tasks.catalog.schema import SUITE_SCHEMA
from dlperf_tasks.catalog.suite_dict import suite_to_dict
from dlperf_tasks.core.model import ParallelLayout, Precision, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks import frameworks
from dlperf_tasks.catalog.launcher_checks import check_launcher
from dlperf_tasks.catalog.cron import check_cron
from dlperf_tasks.policy.adaptive import AdaptivePolicy
from dlperf_tasks.policy.nodehealth import HealthConfig

PRECISIONS = tuple(p.value for p in Precision)
__all__ = ["PRECISIONS", "build_suite", "check_image_ref", "suite_to_dict"]  # the last two re-exported


def _schema_validator():
    # jsonschema is imported here, not at module import, and the validator is built once.
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema

        cls = jsonschema.validators.validator_for(SUITE_SCHEMA)
        _VALIDATOR = cls(SUITE_SCHEMA)
    return _VALIDATOR


_VALIDATOR = None


def _schema_problems(data: Any, problems: Problems) -> None:
    validator = _schema_validator()
    for err in sorted(validator.iter_errors(data), key=lambda e: [str(x) for x in e.absolute_path]):
        path = tuple(err.absolute_path)
        msg = err.message
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = sorted(err.schema.get("properties", {}))
            unknown = sorted(set(err.instance) - set(allowed))
            msg = f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
        elif err.validator == "oneOf" and path and path[-1] == "batch_sizes":
            msg = "must be a list of positive integers or a mapping precision -> list of positive integers"
        problems.add(path, msg)



def _check_layouts(data: dict, problems: Problems) -> list[tuple[Topology, ParallelLayout]]:
    out = []
    no_dupes([lay["case"] for lay in data["layouts"]], ("layouts",), "case", problems)
    for i, lay in enumerate(data["layouts"]):
        path = ("layouts", i)
        label = f" ({lay['case']})"
        ints = ["nodes", "gpus", "dp", "mp", "pp", "micro_batch", "global_batch", "hidden_size", "num_heads",
                "num_layers", "seq_length", "accumulation_steps", "micro_batch_times_dp", "cp", "vp"]
        bad = [k for k in ints if k in lay and lay[k] < 1]
        for k in bad:
            problems.add(path + (k,), f"{k} = {lay[k]} must be >= 1", label)
        if bad:
            continue
        n, g, dp, mp, pp = lay["nodes"], lay["gpus"], lay["dp"], lay["mp"], lay["pp"]
        cp, vp = lay.get("cp", 1), lay.get("vp", 1)
        if dp * mp * pp * cp != n * g:
            what = "dp*mp*pp" if cp == 1 else "dp*mp*pp*cp"
            problems.add(path, f"{what} = {dp * mp * pp * cp} != nodes*gpus = {n * g}", label)
        if lay["num_layers"] % (pp * vp):
            problems.add(path, f"pp*vp = {pp * vp} does not divide num_layers = {lay['num_layers']}", label)
        if lay["num_layers"] % pp:
            problems.add(path, f"pp = {pp} does not divide num_layers = {lay['num_layers']}", label)
        if lay["num_heads"] % mp:
            problems.add(path, f"mp = {mp} does not divide num_heads = {lay['num_heads']}", label)
        if lay["hidden_size"] % lay["num_heads"]:
            problems.add(path, f"num_heads = {lay['num_heads']} does not divide hidden_size = {lay['hidden_size']}", label)
        mdp = lay["micro_batch"] * dp
        if lay["global_batch"] % mdp:
            problems.add(path, f"global_batch = {lay['global_batch']} is not divisible by micro_batch*dp = {mdp}", label)
        elif "accumulation_steps" in lay and lay["accumulation_steps"] != lay["global_batch"] // mdp:
            problems.add(path, f"accumulation_steps = {lay['accumulation_steps']} != global_batch/(micro_batch*dp) = "
                               f"{lay['global_batch'] // mdp}", label)
        if "micro_batch_times_dp" in lay and lay["micro_batch_times_dp"] != mdp:
            problems.add(path, f"micro_batch_times_dp = {lay['micro_batch_times_dp']} != micro_batch*dp = {mdp}", label)
        fields = {k: lay[k] for k in ("group", "case", "dp", "mp", "pp", "micro_batch", "global_batch",
                                      "hidden_size", "num_heads", "num_layers")}
        for k in ("seq_length", "cp", "vp"):
            if k in lay:
                fields[k] = lay[k]
        out.append((Topology(n, g), ParallelLayout(**fields)))
    return out



def build_suite(data: Any, filename: str, lines: dict, expected_id: str | None = None, *,
                schema: bool = True) -> Suite:
    """Validate ``data`` (a parsed YAML document) and return the :class:`Suite`; raise CatalogError otherwise.

    ``schema=False`` skips the JSON Schema pass (jsonschema is slow to import): only for the
    package's own suites, which tests/unit/test_catalog.py validates with it
    (``test_builtin_suites_pass_the_json_schema``); every other check still runs."""
    problems = _shape_problems(data, filename, lines, schema)
    problems.raise_if_any()  # the semantic checks below rely on the shape
    _check_scalars(data, expected_id, problems)
    precisions, xla = data["precisions"], data.get("xla", [False])
    layouts = _check_layouts(data, problems) if "layouts" in data else []
    if "layouts" in data and not data["framework"].startswith(("megatron", "torchtitan")):
        problems.add(("layouts",), f"layouts are only meaningful for Megatron frameworks and torchtitan, not {data['framework']!r}")
    batch_sizes, by_prec = _batch_sizes(data, layouts, problems)
    topologies = _topologies(data, layouts, problems)
    exclude = _exclusions(data, problems)
    container = _container(data, problems)
    upstream = _upstream(data, filename, problems)
    env, env_multi = (env_of(data, key, problems) for key in ("env", "env_multi_node"))
    accumulation = check_launcher(data, filename, problems)
    _decision_fields(data, problems)
    schedule = _schedule(data, problems)
    problems.raise_if_any()
    w = data["window"]
    return Suite(
        id=data["id"],
        framework=data["framework"],
        dag=data["dag"],
        model=data["model"],
        description=data.get("description", "").strip(),
        container=container,
        upstream=upstream,
        launcher=dict(data.get("launcher") or {}),
        env=env,
        window=Window(warmup=w["warmup"], measure=w["measure"], rule=w.get("rule", "timestamps")),
        trials=data["trials"],
        batch_sizes=batch_sizes,
        precisions=tuple(precisions),
        xla=tuple(xla),
        topologies=tuple(topologies),
        layouts=tuple(layouts),
        timeout_s=data.get("timeout_s", 3600),
        hang_timeout_s=data.get("hang_timeout_s", 600),
        source=filename,
        extra=_extra(data),
        batch_sizes_by_precision=by_prec,
        exclude=tuple(exclude),
        env_multi_node=env_multi,
        accumulation_steps=accumulation,
        schedule=schedule,
    )


def _shape_problems(data: Any, filename: str, lines: dict, schema: bool) -> Problems:
    """The shape of the document: a mapping, the JSON Schema (when ``schema``), plain one-line strings."""
    problems = Problems(filename, lines)
    if not isinstance(data, dict):
        problems.add((), f"a suite file must be a mapping (got {type(data).__name__})")
        problems.raise_if_any()
    if schema:
        _schema_problems(data, problems)
    check_plain_strings(data, (), problems)
    return problems


def _check_scalars(data: dict, expected_id: str | None, problems: Problems) -> None:
    """id, framework, trials, window, timeouts, precisions and XLA values."""
    if expected_id is not None and data["id"] != expected_id:
        problems.add(("id",), f"id {data['id']!r} must equal the file name {expected_id!r}")
    if data["framework"] not in frameworks.names():
        problems.add(("framework",), f"unknown framework {data['framework']!r}; known: {', '.join(frameworks.names())}")
    if data["trials"] < 1:
        problems.add(("trials",), f"trials = {data['trials']} must be >= 1")
    w = data["window"]
    if w["warmup"] < 0:
        problems.add(("window", "warmup"), f"warmup = {w['warmup']} must be >= 0")
    if w["measure"] < 1:
        problems.add(("window", "measure"), f"measure = {w['measure']} must be >= 1")
    timeout_s, hang_s = data.get("timeout_s", 3600), data.get("hang_timeout_s", 600)
    if timeout_s < 1:
        problems.add(("timeout_s",), f"timeout_s = {timeout_s} must be >= 1")
    if hang_s < 1:
        problems.add(("hang_timeout_s",), f"hang_timeout_s = {hang_s} must be >= 1")
    elif hang_s > timeout_s:
        problems.add(("hang_timeout_s",), f"hang_timeout_s = {hang_s} is larger than timeout_s = {timeout_s}")
    precisions = data["precisions"]
    for i, prec in enumerate(precisions):
        if prec not in PRECISIONS:
            problems.add(("precisions", i), f"unknown precision {prec!r}; known: {', '.join(PRECISIONS)}")
    no_dupes(precisions, ("precisions",), "precision", problems)
    no_dupes(data.get("xla", [False]), ("xla",), "xla value", problems)


def _batch_sizes(data: dict, layouts: list, problems: Problems) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
    """The suite's batch sizes and, when given per precision, the mapping precision -> batch sizes."""
    raw_bs, precisions = data.get("batch_sizes"), data["precisions"]
    if raw_bs is None:
        if not layouts:
            problems.add((), "missing 'batch_sizes' (a list, or a mapping precision -> list)")
            return (), {}
        return tuple(dict.fromkeys(lay.micro_batch for _, lay in layouts)), {}
    lists = raw_bs.items() if isinstance(raw_bs, dict) else [(None, raw_bs)]
    for prec, values in lists:
        path = ("batch_sizes",) + ((prec,) if prec is not None else ())
        if prec is not None and prec not in precisions:
            problems.add(path, f"precision {prec!r} is not in precisions {precisions}")
        for i, b in enumerate(values):
            if b < 1:
                problems.add(path + (i,), f"batch size {b} must be >= 1")
        no_dupes(values, path, "batch size", problems)
    by_prec: dict[str, tuple[int, ...]] = {}
    if isinstance(raw_bs, dict):
        for prec in precisions:
            if prec not in raw_bs:
                problems.add(("batch_sizes",), f"no batch sizes for precision {prec!r}")
        by_prec = {p: tuple(v) for p, v in raw_bs.items()}
        batch_sizes = tuple(dict.fromkeys(b for v in raw_bs.values() for b in v))
    else:
        batch_sizes = tuple(raw_bs)
    if layouts:
        problems.add(("batch_sizes",), "suites with layouts take the batch size from each layout's micro_batch; remove batch_sizes")
    return batch_sizes, by_prec


def _topologies(data: dict, layouts: list, problems: Problems) -> list[Topology]:
    """The suite's topologies (from its layouts when it lists none)."""
    topologies: list[Topology] = []
    if "topologies" in data:
        for i, text in enumerate(data["topologies"]):
            t = topology_at(text, ("topologies", i), problems)
            if t is not None:
                topologies.append(t)
        no_dupes([t.name for t in topologies], ("topologies",), "topology", problems)
    elif layouts:
        topologies = sorted({t for t, _ in layouts}, key=lambda t: (t.world_size, t.nodes))
    else:
        problems.add((), "missing 'topologies' (e.g. [1n1g, 1n8g, 2n8g, 4n8g])")
    if layouts and "topologies" in data:
        names = {t.name for t in topologies}
        for i, (t, lay) in enumerate(layouts):
            if t.name not in names:
                problems.add(("layouts", i), f"topology {t.name} is not in topologies {sorted(names)}", f" ({lay.case})")
    return topologies


def _exclusions(data: dict, problems: Problems) -> list[dict]:
    """The ``exclude`` rules, their topology in canonical form."""
    precisions, exclude = data["precisions"], []
    for i, rule in enumerate(data.get("exclude", [])):
        path = ("exclude", i)
        if "precision" in rule and rule["precision"] not in precisions:
            problems.add(path + ("precision",), f"precision {rule['precision']!r} is not in precisions {precisions}")
        if "topology" in rule:
            t = topology_at(rule["topology"], path + ("topology",), problems)
            rule = dict(rule, topology=t.name if t else rule["topology"])
        if "batch_size" in rule and rule["batch_size"] < 1:
            problems.add(path + ("batch_size",), f"batch size {rule['batch_size']} must be >= 1")
        exclude.append(dict(rule))
    return exclude


def _container(data: dict, problems: Problems) -> ContainerSpec | None:
    if not data.get("container"):
        return None
    check_container(data["container"], problems)
    c = data["container"]
    return ContainerSpec(
        image=c["image"],
        shm_size=c.get("shm_size", "16g"),
        ulimits=tuple(c.get("ulimits", ["memlock=-1"])),
        ipc_host=c.get("ipc_host", True),
        net_host=c.get("net_host", True),
        devices=tuple(c.get("devices", [])),
        privileged=c.get("privileged", False),
        mounts=tuple(c.get("mounts", [])),
        sshd_port=c.get("sshd_port"),
        cap_add=tuple(c.get("cap_add", [])),
        digest=c.get("digest") or None,
        min_driver=c.get("min_driver") or None,
        versions=tuple(sorted((str(k), str(v)) for k, v in (c.get("versions") or {}).items())),
    )


def _upstream(data: dict, filename: str, problems: Problems) -> Upstream | None:
    if not data.get("upstream"):
        return None
    check_upstream(data["upstream"], problems)
    check_patches(data, filename, problems)
    u = data["upstream"]
    return Upstream(
        repo=u["repo"],
        commit=u.get("commit", ""),
        workdir=u.get("workdir", ""),
        patches=tuple(Patch(p["path"], p["description"].strip(), p.get("diff", ""), p.get("file", ""))
                      for p in u.get("patches", [])),
        ref=u.get("ref", ""),
    )


def _extra(data: dict) -> dict[str, Any]:
    """Fields the Suite keeps as they are (requirements, logs, notes, decision settings, upstream note)."""
    extra = {k: data[k] for k in ("requirements", "logs", "notes", "plausible_max_per_gpu", "adaptive",
                                  "node_health", "interconnect_probe") if k in data}
    if data.get("upstream") and data["upstream"].get("note"):
        extra["upstream_note"] = data["upstream"]["note"].strip()
    return extra


def _schedule(data: dict, problems: Problems) -> str | None:
    try:
        return check_cron(data.get("schedule"))
    except ValueError as exc:
        problems.add(("schedule",), str(exc))
        return None



def _decision_fields(data: dict, problems) -> None:
    """``adaptive`` / ``node_health`` (docs/decisions.md) checked when the suite loads, not at sweep time."""
    for key, parse in (("adaptive", AdaptivePolicy.from_value), ("node_health", HealthConfig.from_value)):
        if key in data:
            try:
                parse(data[key])
            except (TypeError, ValueError) as exc:
                problems.add((key,), str(exc))
