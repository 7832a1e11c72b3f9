"""Check a parsed suite YAML and build a :class:`Suite` from it.

Shape (types, required keys, unknown keys) is checked with the JSON Schema in
catalog/schema.py; meaning (Megatron arithmetic, topology strings, known framework,
values safe to reach a shell...) is checked here. Every problem is reported as
``<file>:<line>: <key path>: <what is wrong>``; all problems of a file are reported at once.
"""

from __future__ import annotations

import re
import string
from typing import Any

from dlperf_tasks.catalog.model import ContainerSpec, Patch, Suite, Upstream
from dlperf_tasks.catalog.patches import check_patches
from dlperf_tasks.catalog.schema import SUITE_SCHEMA
from dlperf_tasks.catalog.yamlsrc import KeyPath, format_path
from dlperf_tasks.core.errors import CatalogError, PlanError
from dlperf_tasks.core.model import ParallelLayout, Precision, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks import frameworks
from dlperf_tasks.catalog.launcher_checks import check_launcher
from dlperf_tasks.catalog.cron import check_cron
from dlperf_tasks.policy.adaptive import AdaptivePolicy
from dlperf_tasks.policy.nodehealth import HealthConfig

PRECISIONS = tuple(p.value for p in Precision)

# Docker image reference: [host[:port]/]name[/name...][:tag][@sha256:digest]
_IMAGE_RE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


def check_image_ref(ref: str, where: str = "image") -> str:
    """Return ``ref`` if it is a plain Docker image reference, else raise CatalogError naming ``where``.

    Guards every image that reaches ``docker pull/run`` argv: a value such as ``--privileged``
    or ``-v/:/host`` would otherwise be read by docker as an option.
    """
    if not isinstance(ref, str) or not _IMAGE_RE.match(ref):
        raise CatalogError(f"{where}: {ref!r} is not a Docker image reference ([registry/]name[:tag][@sha256:digest])")
    return ref


_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_REPO_RE = re.compile(r"^https://[A-Za-z0-9.-]+(?::[0-9]+)?/[A-Za-z0-9._/-]+$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ULIMIT_RE = re.compile(r"^[a-z]+=-?[0-9]+(?::-?[0-9]+)?$")
_DEVICE_RE = re.compile(r"^/[A-Za-z0-9_./-]+(?::/[A-Za-z0-9_./-]+)?(?::[rwm]{1,3})?$")
_CAP_RE = re.compile(r"^[A-Z][A-Z_]*$")
_MOUNT_RE = re.compile(r"^[^:\s]+:/[^:\s]*(?::(?:ro|rw))?$")
#: placeholders a mount may use; remote/runtime.py docker_run_argv() fills them from the inventory node
MOUNT_PLACEHOLDERS = frozenset({"data_dir", "workdir", "node"})
_RELPATH_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")

# free text that may span lines (never reaches a shell)
_MULTILINE_OK = {("description",), ("notes",), ("upstream", "note")}


class _Problems:
    """Collects ``(key path, message)`` and renders them with file and line."""

    def __init__(self, filename: str, lines: dict):
        self.filename = filename
        self.lines = lines
        self.items: list[str] = []

    def add(self, path: KeyPath, message: str, label: str = "") -> None:
        line = None
        p = tuple(path)
        while line is None and p is not None:
            line = self.lines.get(p)
            p = p[:-1] if p else None
        where = f"{self.filename}:{line}" if line else self.filename
        self.items.append(f"{where}: {format_path(tuple(path))}{label}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            err = CatalogError("\n".join(self.items))
            err.problems = list(self.items)  # type: ignore[attr-defined]
            raise err


def _schema_validator():
    # jsonschema is imported here, not at module import, and the validator is built once.
    global _VALIDATOR
    if _VALIDATOR is None:
        import jsonschema

        cls = jsonschema.validators.validator_for(SUITE_SCHEMA)
        _VALIDATOR = cls(SUITE_SCHEMA)
    return _VALIDATOR


_VALIDATOR = None


def _check_plain_strings(data: Any, path: KeyPath, problems: _Problems) -> None:
    """Strings that may reach a shell or a command line: no NUL, no line breaks, no other control chars."""
    if path in _MULTILINE_OK or (len(path) >= 3 and path[:2] == ("upstream", "patches")):
        return
    if isinstance(data, str):
        bad = [c for c in data if ord(c) < 32 and c != "\t" or c == "\x7f"]
        if bad:
            problems.add(path, f"contains control character {bad[0]!r}; values must be plain one-line text")
    elif isinstance(data, dict):
        for k, v in data.items():
            if not isinstance(k, str):
                problems.add(path + (k,), f"key {k!r} must be a string")
                continue
            _check_plain_strings(k, path + (k,), problems)
            _check_plain_strings(v, path + (k,), problems)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _check_plain_strings(v, path + (i,), problems)
    elif data is not None and not isinstance(data, (bool, int, float)):
        problems.add(path, f"unsupported value of type {type(data).__name__} (use strings, numbers, lists, mappings)")


def _schema_problems(data: Any, problems: _Problems) -> None:
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


def _topology(text: Any, path: KeyPath, problems: _Problems) -> Topology | None:
    try:
        return Topology.parse(str(text))
    except PlanError as exc:
        problems.add(path, str(exc))
        return None


def _no_dupes(values: list, path: KeyPath, what: str, problems: _Problems) -> None:
    seen = set()
    for i, v in enumerate(values):
        if v in seen:
            problems.add(path + (i,), f"duplicate {what} {v!r}")
        seen.add(v)


def _check_container(c: dict, problems: _Problems) -> None:
    p = ("container",)
    image = c["image"]
    if not _IMAGE_RE.match(image):
        problems.add(p + ("image",), f"invalid image reference {image!r} (expected registry/repo:tag, e.g. nvcr.io/nvidia/mxnet:20.03-py3)")
    for i, u in enumerate(c.get("ulimits", [])):
        if not _ULIMIT_RE.match(u):
            problems.add(p + ("ulimits", i), f"invalid ulimit {u!r} (expected name=soft[:hard], e.g. memlock=-1)")
    for i, d in enumerate(c.get("devices", [])):
        if not _DEVICE_RE.match(d):
            problems.add(p + ("devices", i), f"invalid device {d!r} (expected an absolute path like /dev/infiniband)")
    for i, cap in enumerate(c.get("cap_add", [])):
        if not _CAP_RE.match(cap):
            problems.add(p + ("cap_add", i), f"invalid capability {cap!r} (expected e.g. IPC_LOCK)")
    for i, m in enumerate(c.get("mounts", [])):
        if not _MOUNT_RE.match(m) or any(q in m for q in "`'\""):
            problems.add(p + ("mounts", i), f"invalid mount {m!r} (expected host_path:/container_path[:ro|rw])")
        elif not string.Template(m).is_valid() or set(string.Template(m).get_identifiers()) - MOUNT_PLACEHOLDERS:
            problems.add(p + ("mounts", i), f"invalid mount {m!r}: '$' may only start a placeholder "
                                            f"{', '.join('${%s}' % k for k in sorted(MOUNT_PLACEHOLDERS))} ('$$' = '$')")


def _check_upstream(u: dict, problems: _Problems) -> None:
    p = ("upstream",)
    if not _REPO_RE.match(u["repo"]):
        problems.add(p + ("repo",), f"invalid repository URL {u['repo']!r} (expected https://host/owner/name)")
    commit, ref = u.get("commit", ""), u.get("ref", "")
    if commit and not _COMMIT_RE.match(commit):
        problems.add(p + ("commit",), f"commit {commit!r} must be the full 40-hex-digit lower-case SHA-1")
    if not commit and not ref:
        problems.add(p, "needs 'commit' (40 hex digits) or at least 'ref' (branch/tag)")
    if ref and not _TAG_RE.match(ref.replace("/", "_")):
        problems.add(p + ("ref",), f"invalid git ref {ref!r}")
    for key_path, value in [(p + ("workdir",), u.get("workdir", ""))] + [
        (p + ("patches", i, "path"), patch["path"]) for i, patch in enumerate(u.get("patches", []))
    ]:
        if value and (not _RELPATH_RE.match(value) or ".." in value.split("/")):
            problems.add(key_path, f"{value!r} must be a relative path inside the repository (no '..')")


def _check_layouts(data: dict, problems: _Problems) -> list[tuple[Topology, ParallelLayout]]:
    out = []
    _no_dupes([lay["case"] for lay in data["layouts"]], ("layouts",), "case", problems)
    for i, lay in enumerate(data["layouts"]):
        path = ("layouts", i)
        label = f" ({lay['case']})"
        ints = ["nodes", "gpus", "dp", "mp", "pp", "micro_batch", "global_batch", "hidden_size", "num_heads",
                "num_layers", "seq_length", "accumulation_steps", "micro_batch_times_dp"]
        bad = [k for k in ints if k in lay and lay[k] < 1]
        for k in bad:
            problems.add(path + (k,), f"{k} = {lay[k]} must be >= 1", label)
        if bad:
            continue
        n, g, dp, mp, pp = lay["nodes"], lay["gpus"], lay["dp"], lay["mp"], lay["pp"]
        if dp * mp * pp != n * g:
            problems.add(path, f"dp*mp*pp = {dp * mp * pp} != nodes*gpus = {n * g}", label)
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
        if "seq_length" in lay:
            fields["seq_length"] = lay["seq_length"]
        out.append((Topology(n, g), ParallelLayout(**fields)))
    return out


def _env(data: dict, key: str, problems: _Problems) -> dict[str, str]:
    env = {}
    for k, v in (data.get(key) or {}).items():
        if not _ENV_KEY_RE.match(k):
            problems.add((key, k), f"invalid environment variable name {k!r}")
        env[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return env


def build_suite(data: Any, filename: str, lines: dict, expected_id: str | None = None, *,
                schema: bool = True) -> Suite:
    """Validate ``data`` (a parsed YAML document) and return the :class:`Suite`; raise CatalogError otherwise.

    ``schema=False`` skips the JSON Schema pass (jsonschema costs ~50 ms to import): only for the
    package's own suites, which tests/unit/test_catalog.py validates with it
    (``test_builtin_suites_pass_the_json_schema``); every other check still runs."""
    problems = _Problems(filename, lines)
    if not isinstance(data, dict):
        problems.add((), f"a suite file must be a mapping (got {type(data).__name__})")
        problems.raise_if_any()
    if schema:
        _schema_problems(data, problems)
    _check_plain_strings(data, (), problems)
    problems.raise_if_any()  # the semantic checks below rely on the shape

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
    _no_dupes(precisions, ("precisions",), "precision", problems)
    xla = data.get("xla", [False])
    _no_dupes(xla, ("xla",), "xla value", problems)

    layouts = _check_layouts(data, problems) if "layouts" in data else []
    if "layouts" in data and data["framework"] != "megatron_gpt" and not data["framework"].startswith("megatron"):
        problems.add(("layouts",), f"layouts are only meaningful for Megatron frameworks, not {data['framework']!r}")

    # batch sizes
    raw_bs = data.get("batch_sizes")
    batch_sizes: tuple[int, ...] = ()
    by_prec: dict[str, tuple[int, ...]] = {}
    if raw_bs is None:
        if not layouts:
            problems.add((), "missing 'batch_sizes' (a list, or a mapping precision -> list)")
        else:
            batch_sizes = tuple(dict.fromkeys(lay.micro_batch for _, lay in layouts))
    else:
        lists = raw_bs.items() if isinstance(raw_bs, dict) else [(None, raw_bs)]
        for prec, values in lists:
            path = ("batch_sizes",) + ((prec,) if prec is not None else ())
            if prec is not None and prec not in precisions:
                problems.add(path, f"precision {prec!r} is not in precisions {precisions}")
            for i, b in enumerate(values):
                if b < 1:
                    problems.add(path + (i,), f"batch size {b} must be >= 1")
            _no_dupes(values, path, "batch size", problems)
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

    # topologies
    topologies: list[Topology] = []
    if "topologies" in data:
        for i, text in enumerate(data["topologies"]):
            t = _topology(text, ("topologies", i), problems)
            if t is not None:
                topologies.append(t)
        _no_dupes([t.name for t in topologies], ("topologies",), "topology", problems)
    elif layouts:
        topologies = sorted({t for t, _ in layouts}, key=lambda t: (t.world_size, t.nodes))
    else:
        problems.add((), "missing 'topologies' (e.g. [1n1g, 1n8g, 2n8g, 4n8g])")
    if layouts and "topologies" in data:
        names = {t.name for t in topologies}
        for i, (t, lay) in enumerate(layouts):
            if t.name not in names:
                problems.add(("layouts", i), f"topology {t.name} is not in topologies {sorted(names)}", f" ({lay.case})")

    # exclusions
    exclude = []
    for i, rule in enumerate(data.get("exclude", [])):
        path = ("exclude", i)
        if "precision" in rule and rule["precision"] not in precisions:
            problems.add(path + ("precision",), f"precision {rule['precision']!r} is not in precisions {precisions}")
        if "topology" in rule:
            t = _topology(rule["topology"], path + ("topology",), problems)
            rule = dict(rule, topology=t.name if t else rule["topology"])
        if "batch_size" in rule and rule["batch_size"] < 1:
            problems.add(path + ("batch_size",), f"batch size {rule['batch_size']} must be >= 1")
        exclude.append(dict(rule))

    container = None
    if data.get("container"):
        _check_container(data["container"], problems)
        c = data["container"]
        container = ContainerSpec(
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
        )
    upstream = None
    if data.get("upstream"):
        _check_upstream(data["upstream"], problems)
        check_patches(data, filename, problems)
        u = data["upstream"]
        upstream = Upstream(
            repo=u["repo"],
            commit=u.get("commit", ""),
            workdir=u.get("workdir", ""),
            patches=tuple(Patch(p["path"], p["description"].strip(), p.get("diff", ""), p.get("file", ""))
                          for p in u.get("patches", [])),
            ref=u.get("ref", ""),
        )

    env, env_multi = (_env(data, key, problems) for key in ("env", "env_multi_node"))

    accumulation = check_launcher(data, filename, problems)

    _decision_fields(data, problems)
    schedule = _schedule(data, problems)
    problems.raise_if_any()
    extra = {k: data[k] for k in ("requirements", "logs", "notes", "plausible_max_per_gpu", "adaptive",
                                  "node_health") if k in data}
    if data.get("upstream") and data["upstream"].get("note"):
        extra["upstream_note"] = data["upstream"]["note"].strip()
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
        timeout_s=timeout_s,
        hang_timeout_s=hang_s,
        source=filename,
        extra=extra,
        batch_sizes_by_precision=by_prec,
        exclude=tuple(exclude),
        env_multi_node=env_multi,
        accumulation_steps=accumulation,
        schedule=schedule,
    )


def _schedule(data: dict, problems: _Problems) -> str | None:
    try:
        return check_cron(data.get("schedule"))
    except ValueError as exc:
        problems.add(("schedule",), str(exc))
        return None


def suite_to_dict(suite: Suite) -> dict[str, Any]:
    """The suite in YAML form with every default filled in (what ``dlperf catalog show`` prints)."""
    d: dict[str, Any] = {
        "id": suite.id,
        "framework": suite.framework,
        "dag": suite.dag,
        "schedule": suite.schedule,
        "model": suite.model,
        "description": suite.description,
    }
    if suite.container is None:
        d["container"] = None
    else:
        c = suite.container
        d["container"] = {
            "image": c.image, "shm_size": c.shm_size, "ulimits": list(c.ulimits), "ipc_host": c.ipc_host,
            "net_host": c.net_host, "devices": list(c.devices), "privileged": c.privileged,
            "cap_add": list(c.cap_add), "mounts": list(c.mounts), "sshd_port": c.sshd_port,
        }
    if suite.upstream is None:
        d["upstream"] = None
    else:
        u = suite.upstream
        d["upstream"] = {
            "repo": u.repo, "commit": u.commit, "ref": u.ref, "workdir": u.workdir,
            "patches": [{"path": p.path, "description": p.description, "diff": p.diff, "file": p.file}
                        for p in u.patches],
        }
        if suite.extra.get("upstream_note"):
            d["upstream"]["note"] = suite.extra["upstream_note"]
    d["launcher"] = suite.launcher
    d["env"] = suite.env
    d["env_multi_node"] = suite.env_multi_node
    d["window"] = suite.window.to_dict()
    d["trials"] = suite.trials
    if not suite.layouts:  # Megatron: batch sizes are the layouts' micro batches
        d["batch_sizes"] = ({p: list(v) for p, v in suite.batch_sizes_by_precision.items()}
                            if suite.batch_sizes_by_precision else list(suite.batch_sizes))
    d["precisions"] = list(suite.precisions)
    d["xla"] = list(suite.xla)
    d["topologies"] = [t.name for t in suite.topologies]
    if suite.exclude:
        d["exclude"] = [dict(r) for r in suite.exclude]
    if suite.accumulation_steps:
        d["gradient_accumulation_steps"] = list(suite.accumulation_steps)
    if suite.layouts:
        d["layouts"] = [
            {"group": lay.group, "case": lay.case, "nodes": t.nodes, "gpus": t.gpus_per_node, "dp": lay.dp,
             "mp": lay.mp, "pp": lay.pp, "micro_batch": lay.micro_batch, "global_batch": lay.global_batch,
             "accumulation_steps": lay.accumulation_steps, "hidden_size": lay.hidden_size,
             "num_heads": lay.num_heads, "num_layers": lay.num_layers, "seq_length": lay.seq_length}
            for t, lay in suite.layouts
        ]
    d["timeout_s"] = suite.timeout_s
    d["hang_timeout_s"] = suite.hang_timeout_s
    for k in ("requirements", "logs", "notes"):
        if k in suite.extra:
            d[k] = suite.extra[k]
    return d


def _decision_fields(data: dict, problems) -> None:
    """``adaptive`` / ``node_health`` (docs/decisions.md) checked when the suite loads, not at sweep time."""
    for key, parse in (("adaptive", AdaptivePolicy.from_value), ("node_health", HealthConfig.from_value)):
        if key in data:
            try:
                parse(data[key])
            except (TypeError, ValueError) as exc:
                problems.add((key,), str(exc))
