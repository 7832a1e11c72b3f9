"""The image a trial ran with on a Slurm cluster (pyxis): pinned by digest, confirmed from pyxis's own lines.

What pyxis and enroot expose (NVIDIA/pyxis 0.24.0 ``pyxis_slurmstepd.c``, NVIDIA/enroot ``src/docker.sh``):

* enroot takes ``[REGISTRY#]IMAGE[:TAG]@sha256:<hex>`` and fetches the manifest by that digest (the tag is
  ignored), checking every layer's sha256 as it downloads: importing a digest reference yields that image
  or fails the step.
* after each import pyxis prints ``pyxis: imported docker image: <the --container-image value>`` into the
  step's output, once per node of the step; neither it nor ``enroot import`` prints the digest of a tag
  reference (``enroot digest``, enroot 4.0 and later, asks the registry, not what was imported).

So the catalog's pinned digest (``ContainerSpec.pinned_ref``, the rule the Docker runtime uses) goes into
``--container-image``, and each node's record (``node_env``, as on the Docker runtime) keeps the digest of
the reference pyxis says it imported there. With a pinned digest, a node whose output has no such line (no
import: a reused named container, another container plugin) or names another digest refuses the trial.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

IMPORTED = "pyxis: imported docker image: "
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")
#: how much of the start of a node's output is searched (pyxis prints before the task starts)
HEAD_BYTES = 1 << 20


def imported_images(text: str) -> list[str]:
    """The image references of pyxis's ``imported docker image`` lines, in order."""
    return [line.split(IMPORTED, 1)[1].strip() for line in text.splitlines() if IMPORTED in line]


def digest_of(ref: str) -> str | None:
    m = _DIGEST.search(ref.strip())
    return m.group(1) if m else None


def read_head(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD_BYTES).decode(errors="replace")
    except OSError:
        return ""


def batch_hosts(batch_out: str) -> list[str]:
    """The job's hosts in node-id order, from the batch script's ``dlperf-nodes:`` line."""
    for line in batch_out.splitlines():
        if line.startswith("dlperf-nodes:"):
            return line.split(":", 1)[1].split()
    return []


def node_images(outputs: Iterable[tuple[str, str]]) -> dict[str, dict[str, str | None]]:
    """``node_env`` of a Slurm trial: per node (name, its output), the digest pyxis imported there."""
    env: dict[str, dict[str, str | None]] = {}
    for name, text in outputs:
        digests = [digest_of(ref) for ref in imported_images(text)]
        env[name] = {"gpu_model": None, "image_digest": digests[-1] if digests else None}
    return env


def refusal(pinned: str | None, env: dict[str, dict[str, str | None]], job_id: str) -> str:
    """Empty when every node imported the pinned digest (or nothing is pinned); else the trial's refusal."""
    if not pinned:
        return ""
    if not env:
        return f"slurm job {job_id}: no node output to confirm the pinned image {pinned}: trial refused"
    for node, e in sorted(env.items()):
        got = e.get("image_digest")
        if got != pinned:
            seen = f"imported {got}" if got else "shows no pyxis import of a digest reference"
            return (f"slurm job {job_id}: {node} {seen}, the catalog pins {pinned}: trial refused "
                    f"(another image than the pinned one)")
    return ""
