"""Helpers for the framework command builders (``Framework.launch``).

Everything here produces argv lists and env dicts of plain strings; nothing is ever
joined into a shell string except by :meth:`LaunchSpec.shell` (``shlex.join``), so a
value from a suite YAML or the UI always reaches the remote shell as one literal word.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.frameworks.launchspec import NodeSpec

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def setting(settings: Mapping | None, key: str, default: Any) -> Any:
    """``settings[key]`` if present and not None, else ``default``."""
    if settings and settings.get(key) is not None:
        return settings[key]
    return default


def text(settings: Mapping | None, key: str, default: str) -> str:
    v = setting(settings, key, default)
    if isinstance(v, (list, dict, tuple, set)):
        raise CatalogError(f"launcher.{key} must be a string, got {type(v).__name__}: {v!r}")
    return str(v)


def integer(settings: Mapping | None, key: str, default: int, minimum: int = 1, maximum: int | None = None) -> int:
    v = setting(settings, key, default)
    try:
        if isinstance(v, bool):
            raise ValueError
        i = int(v)
        if isinstance(v, float) and v != i:
            raise ValueError
    except (TypeError, ValueError):
        raise CatalogError(f"launcher.{key} must be an integer, got {v!r}") from None
    if i < minimum or (maximum is not None and i > maximum):
        rng = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise CatalogError(f"launcher.{key} must be {rng}, got {i}")
    return i


def str_list(settings: Mapping | None, key: str) -> list[str]:
    """A list of literal argv words (``extra_args``...). A plain string is refused so that
    nobody expects shell word splitting."""
    v = setting(settings, key, [])
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
        raise CatalogError(f"launcher.{key} must be a list of strings (one argv word each), got {v!r}")
    out = []
    for i, item in enumerate(v):
        if isinstance(item, (dict, list, tuple, set)) or item is None:
            raise CatalogError(f"launcher.{key}[{i}] must be a string, got {item!r}")
        out.append(str(item))
    return out


def env_from(settings: Mapping | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` env updated with ``settings['env']`` (a mapping NAME -> value)."""
    env = {k: str(v) for k, v in (base or {}).items()}
    extra = setting(settings, "env", {})
    if not isinstance(extra, Mapping):
        raise CatalogError(f"launcher.env must be a mapping NAME: value, got {extra!r}")
    for k, v in extra.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise CatalogError(f"launcher.env: invalid variable name {k!r} (letters, digits, _; not starting with a digit)")
        if v is None or isinstance(v, (dict, list, tuple, set)):
            raise CatalogError(f"launcher.env.{k} must be a string, got {v!r}")
        env[k] = str(v)
    return env


def env_names(settings: Mapping | None, key: str) -> list[str]:
    names = str_list(settings, key)
    for n in names:
        if not _ENV_NAME.match(n):
            raise CatalogError(f"launcher.{key}: invalid variable name {n!r}")
    return names


def check_nodes(nodes: list[NodeSpec], node_rank: int, expected: int) -> None:
    """The node list must match the cell's topology and ``node_rank`` must index it."""
    if len(nodes) != expected:
        raise ValueError(f"cell needs {expected} node(s) but {len(nodes)} were allocated")
    if not 0 <= node_rank < len(nodes):
        raise ValueError(f"node_rank {node_rank} out of range for {len(nodes)} node(s)")
    for n in nodes:
        if not n.address or any(c.isspace() for c in n.address) or n.address.startswith("-"):
            raise ValueError(f"node {n.name!r} has an invalid address {n.address!r}")


#: where a trial container mounts the node's catalog files (``<workdir>/catalog/``, see
#: :mod:`dlperf_tasks.catalog.nodefiles`)
CONTAINER_DIR = "/dlperf/catalog"


def container_path(relpath: str, settings=None) -> str:
    """Path of a node file as the training command sees it: inside the trial container
    (:data:`CONTAINER_DIR`), or, when the launcher settings carry ``node_files_dir`` (host runtime:
    the engine passes ``node_files_dir(node.workdir)``), in that directory."""
    base = (settings or {}).get("node_files_dir") or CONTAINER_DIR
    return posixpath.join(str(base), relpath)
