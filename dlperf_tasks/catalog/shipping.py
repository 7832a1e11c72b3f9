"""The files a suite ships to every node: its catalog data files (e.g. a BERT config, see
:mod:`dlperf_tasks.catalog.nodefiles`) and its source patches with their applier
(:mod:`dlperf_tasks.catalog.patches`); written by prepare over SSH."""

from __future__ import annotations

import posixpath
import shlex

from dlperf_tasks.catalog import patches
from dlperf_tasks.catalog.nodefiles import FILE_KEYS, find_data_file, node_files_dir
from dlperf_tasks.core.errors import CatalogError


def node_files(suite) -> dict[str, bytes]:
    """``{relpath: bytes}`` the suite needs on every node (empty for most suites)."""
    out: dict[str, bytes] = {}
    for key in FILE_KEYS:
        name = (suite.launcher or {}).get(key)
        if name:
            out[str(name)] = find_data_file(str(name), suite.source).read_bytes()
    out.update(patches.node_files(suite))  # source patches and their applier (catalog/patches.py)
    return out


def put_node_files(pool, node_name: str, node_workdir: str, suite) -> list[str]:
    """Write :func:`node_files` to one node (``pool``: an SSHPool); returns the remote paths."""
    files = node_files(suite)
    if not files:
        return []
    base = node_files_dir(node_workdir)
    res = pool.run(node_name, f"mkdir -p {shlex.quote(base)}", timeout=30)
    if res.rc != 0:
        raise CatalogError(f"node {node_name}: cannot create {base} (exit {res.rc})")
    paths = []
    for rel, data in sorted(files.items()):
        path = posixpath.join(base, rel)
        pool.put_bytes(node_name, path, data, mode=0o644)
        paths.append(path)
    return paths
