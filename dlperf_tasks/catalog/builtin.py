"""The built-in suites, validated once when dlperf is installed.

``make install`` runs ``dlperf catalog build``: every ``catalog/suites/*.yaml`` goes through the full
checks (JSON Schema included) and the validated suites are written to ``catalog/builtin_suites.json``
with the SHA-256 of each file's bytes. The loader takes a built-in suite from there when its file still
has that digest, so a command that only needs a built-in suite imports neither PyYAML nor the
validator; an edited file (or no data file, e.g. a plain wheel install) is read and checked as YAML,
with the same result (tests/unit/test_catalog_builtin.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from dlperf_tasks.catalog.model import ContainerSpec, Patch, Suite, Upstream
from dlperf_tasks.core.model import ParallelLayout, Window
from dlperf_tasks.core.topology import Topology

#: where ``dlperf catalog build`` writes the validated built-in suites (not in git: a build output)
DATA_FILE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "builtin_suites.json")
#: bumped whenever the layout below changes; a data file of another format is not used
FORMAT = 1


def digest(raw: bytes) -> str:
    """The digest a suite file's bytes are recorded under."""
    return hashlib.sha256(raw).hexdigest()


def suite_to_data(suite: Suite) -> dict[str, Any]:
    """``suite`` as plain JSON data, every field (``source`` aside: it is where the file is now)."""
    c, u = suite.container, suite.upstream
    return {
        "id": suite.id, "framework": suite.framework, "dag": suite.dag, "model": suite.model,
        "description": suite.description,
        "container": None if c is None else {
            "image": c.image, "shm_size": c.shm_size, "ulimits": list(c.ulimits), "ipc_host": c.ipc_host,
            "net_host": c.net_host, "devices": list(c.devices), "privileged": c.privileged,
            "mounts": list(c.mounts), "sshd_port": c.sshd_port, "cap_add": list(c.cap_add),
            "digest": c.digest, "min_driver": c.min_driver, "versions": [list(v) for v in c.versions]},
        "upstream": None if u is None else {
            "repo": u.repo, "commit": u.commit, "workdir": u.workdir, "ref": u.ref,
            "patches": [[p.path, p.description, p.diff, p.file] for p in u.patches]},
        "launcher": suite.launcher, "env": suite.env,
        "window": [suite.window.warmup, suite.window.measure, suite.window.rule],
        "trials": suite.trials, "batch_sizes": list(suite.batch_sizes), "precisions": list(suite.precisions),
        "xla": list(suite.xla), "topologies": [t.name for t in suite.topologies],
        "layouts": [[t.name, {f: getattr(lay, f) for f in ParallelLayout.__dataclass_fields__}]
                    for t, lay in suite.layouts],
        "timeout_s": suite.timeout_s, "hang_timeout_s": suite.hang_timeout_s, "extra": suite.extra,
        "batch_sizes_by_precision": {p: list(v) for p, v in suite.batch_sizes_by_precision.items()},
        "exclude": list(suite.exclude), "env_multi_node": suite.env_multi_node,
        "accumulation_steps": list(suite.accumulation_steps), "schedule": suite.schedule,
    }


def suite_from_data(d: dict[str, Any], source: str) -> Suite:
    """The :class:`Suite` that :func:`suite_to_data` wrote, loaded from ``source``."""
    c, u = d["container"], d["upstream"]
    container = None if c is None else ContainerSpec(
        **{**c, "ulimits": tuple(c["ulimits"]), "devices": tuple(c["devices"]), "mounts": tuple(c["mounts"]),
           "cap_add": tuple(c["cap_add"]), "versions": tuple(tuple(v) for v in c["versions"])})
    upstream = None if u is None else Upstream(
        repo=u["repo"], commit=u["commit"], workdir=u["workdir"], ref=u["ref"],
        patches=tuple(Patch(*p) for p in u["patches"]))
    return Suite(
        id=d["id"], framework=d["framework"], dag=d["dag"], model=d["model"], description=d["description"],
        container=container, upstream=upstream, launcher=d["launcher"], env=d["env"],
        window=Window(*d["window"]), trials=d["trials"], batch_sizes=tuple(d["batch_sizes"]),
        precisions=tuple(d["precisions"]), xla=tuple(d["xla"]),
        topologies=tuple(Topology.parse(t) for t in d["topologies"]),
        layouts=tuple((Topology.parse(t), ParallelLayout(**lay)) for t, lay in d["layouts"]),
        timeout_s=d["timeout_s"], hang_timeout_s=d["hang_timeout_s"], source=source, extra=d["extra"],
        batch_sizes_by_precision={p: tuple(v) for p, v in d["batch_sizes_by_precision"].items()},
        exclude=tuple(d["exclude"]), env_multi_node=d["env_multi_node"],
        accumulation_steps=tuple(d["accumulation_steps"]), schedule=d["schedule"],
    )


def validated(name: str, raw: bytes, data_file: str | None = None) -> Suite | None:
    """The built-in suite file ``name`` (its bytes ``raw``) as ``dlperf catalog build`` validated it;
    None when there is no data file, it is of another format, or it has no entry for these bytes."""
    try:
        with open(data_file or DATA_FILE, "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    entry = doc.get("suites", {}).get(os.path.basename(name))
    if entry is None or entry.get("sha256") != digest(raw):
        return None
    return suite_from_data(entry["suite"], name)


def write(entries: dict[str, tuple[bytes, Suite]], data_file: str = DATA_FILE) -> None:
    """Write the data file: ``entries`` maps a built-in file's name to its bytes and its validated suite.
    Each suite must come back equal from its data, its mappings in the same order, else ValueError names
    it (nothing is written)."""
    suites = {}
    for name, (raw, suite) in sorted(entries.items()):
        data = suite_to_data(suite)
        text = json.dumps(data)
        back = suite_from_data(json.loads(text), suite.source)
        if back != suite or json.dumps(suite_to_data(back)) != text:
            raise ValueError(f"{suite.source}: the suite does not survive its JSON form (a mapping key that is "
                             f"not a string?); it cannot be stored in {data_file}")
        suites[name] = {"sha256": digest(raw), "suite": data}
    tmp = f"{data_file}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"format": FORMAT, "suites": suites}, fh, indent=1)  # in order: a suite's mappings keep theirs
        fh.write("\n")
    os.replace(tmp, data_file)
