"""A suite in YAML form with every default filled in (what ``dlperf catalog show`` prints)."""

from __future__ import annotations

from typing import Any

from dlperf_tasks.catalog.model import Suite


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
        for key, value in (("digest", c.digest), ("min_driver", c.min_driver), ("versions", dict(c.versions))):
            if value:
                d["container"][key] = value
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
             "num_heads": lay.num_heads, "num_layers": lay.num_layers, "seq_length": lay.seq_length,
             **({"cp": lay.cp} if lay.cp != 1 else {}), **({"vp": lay.vp} if lay.vp != 1 else {})}
            for t, lay in suite.layouts
        ]
    d["timeout_s"] = suite.timeout_s
    d["hang_timeout_s"] = suite.hang_timeout_s
    for k in ("requirements", "logs", "notes"):
        if k in suite.extra:
            d[k] = suite.extra[k]
    return d
