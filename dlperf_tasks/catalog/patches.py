"""A suite's source patches, applied for real.

A patch with ``file:`` names a unified diff among the catalog data files
(``dlperf_tasks/catalog/data/<name>.diff``, or a site suite's own ``data/``), made against the
upstream repository at the suite's pinned commit. Prepare ships it to every node with the
applier, ``data/dlperf_patch.py`` (stdlib only: it runs inside the trial container), and every
process of a trial starts through :func:`wrap`: the applier patches the checkout whose root is the
launch workdir minus ``upstream.workdir``, then ``exec``s the command. A hunk whose old lines are
not in the file fails the trial with one line before anything trains.

A patch without ``file:`` is declared only (its description, maybe a ``diff:`` to read): nothing
applies it, and ``dlperf catalog check`` says so.
"""

from __future__ import annotations

import importlib.util
import posixpath
from functools import lru_cache
from typing import Any, Mapping

from dlperf_tasks.catalog.nodefiles import BUILTIN_DATA_DIR, container_path, find_data_file
from dlperf_tasks.core.errors import CatalogError

APPLIER = "dlperf_patch.py"


@lru_cache(maxsize=1)
def applier():
    """The node-side applier as a module (its parser checks the diffs at catalog load)."""
    spec = importlib.util.spec_from_file_location("dlperf_patch", BUILTIN_DATA_DIR / APPLIER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_patches(data: Mapping[str, Any], filename: str, problems) -> None:
    """Problems for ``upstream.patches[].file``: a catalog data file holding a unified diff whose
    target files are inside the repository; the suite's launcher must say where the checkout is."""
    u = data.get("upstream") or {}
    for i, patch in enumerate(u.get("patches") or []):
        name = patch.get("file")
        if not name:
            continue
        path = ("upstream", "patches", i, "file")
        if not str(name).endswith(".diff"):
            problems.add(path, f"{name!r} must be a .diff file (a unified diff)")
            continue
        try:
            text = find_data_file(str(name), filename).read_text(encoding="utf-8")
            files = applier().parse(text, str(name))
        except (CatalogError, OSError, UnicodeDecodeError) as exc:
            problems.add(path, str(exc))
            continue
        except applier().PatchError as exc:
            problems.add(path, str(exc))
            continue
        if patch.get("path") and patch["path"] not in [f for f, _ in files]:
            problems.add(path, f"{name} does not touch {patch['path']!r} (it patches {', '.join(f for f, _ in files)})")
        if not u.get("workdir"):
            problems.add(("upstream", "workdir"), "a suite that applies patches needs upstream.workdir (the launch "
                                                  "workdir inside the checkout) to find the checkout's root")


def patch_files(suite) -> list[str]:
    u = getattr(suite, "upstream", None)
    return [p.file for p in (u.patches if u else ()) if p.file]


def node_files(suite) -> dict[str, bytes]:
    """The diffs and the applier, for prepare to put on every node (empty without applied patches)."""
    names = patch_files(suite)
    if not names:
        return {}
    out = {n: find_data_file(n, suite.source).read_bytes() for n in names}
    out[APPLIER] = (BUILTIN_DATA_DIR / APPLIER).read_bytes()
    return out


def checkout_root(workdir: str, upstream_workdir: str) -> str:
    """``/workspace/gluon-cv`` from ``/workspace/gluon-cv/scripts/classification/imagenet`` and
    ``scripts/classification/imagenet``; ValueError when the launch workdir is not inside it."""
    wd, sub = posixpath.normpath(workdir), posixpath.normpath(upstream_workdir).strip("/")
    if not wd.endswith("/" + sub):
        raise ValueError(f"launch workdir {workdir!r} does not end with upstream.workdir {upstream_workdir!r}: "
                         "cannot find the checkout to patch")
    return wd[: -len(sub) - 1] or "/"


def wrap(suite, argv: list[str], workdir: str | None, settings: Mapping | None = None) -> list[str]:
    """``argv`` started through the applier when the suite applies patches (else ``argv`` unchanged)."""
    names = patch_files(suite)
    if not names:
        return list(argv)
    if not workdir:
        raise ValueError("the suite applies source patches but the launch has no workdir")
    root = checkout_root(workdir, suite.upstream.workdir)
    python = str((settings or {}).get("python") or "python3")
    argv = list(argv)
    if argv and posixpath.basename(argv[0]) == "mpirun":
        # the ranks mpirun starts on other nodes get the applier's export too (their own container ran
        # the applier before its sshd: see remote/trialcmd.helper_prelude)
        argv[1:1] = ["-x", "DLPERF_PATCHES_APPLIED"]
    return [python, container_path(APPLIER, settings), "--root", root,
            *[container_path(n, settings) for n in names], "--", *argv]
