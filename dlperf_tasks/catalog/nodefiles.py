"""Files a suite ships to the nodes (catalog data), and what they say about the model.

Some upstream entry points read a file we must control: DeepLearningExamples' PyTorch
BERT reads ``--config_file``, and the ``bert_config.json`` in its repository at the pinned
commit is BERT-**large**. Seed 001 pointed ``BERT_CONFIG`` at a base config, so the catalog
ships one (``dlperf_tasks/catalog/data/bert_config_base.json``) and prepare puts it on every
node.

Contract (engine/prepare and the container runtime):

* ``catalog/shipping.py`` :func:`node_files` (also ``Suite.node_files()``) -> ``{relpath: bytes}``.
* prepare writes each file to ``node_files_dir(node.workdir) + "/" + relpath`` on
  every node (:func:`~dlperf_tasks.catalog.shipping.put_node_files` does it over an :class:`~dlperf_tasks.remote.ssh.SSHPool`);
* the suite mounts that directory read-only at :data:`CONTAINER_DIR` (``container.mounts:
  ["${workdir}/catalog:/dlperf/catalog:ro"]``), and the launcher passes
  ``CONTAINER_DIR/<relpath>``; with the host runtime (no container) the engine adds
  ``node_files_dir: node_files_dir(node.workdir)`` to the launcher settings and the
  launcher passes that host path instead.

Launcher keys that name a data file: :data:`FILE_KEYS`. A file is looked up in the suite
file's own ``data/`` directory first (site suites on ``DLPERF_CATALOG_PATH``), then in the
built-in ``dlperf_tasks/catalog/data/``.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.frameworks._launch import CONTAINER_DIR, container_path  # noqa: F401 - the mount point and its paths

BUILTIN_DATA_DIR = Path(__file__).resolve().parent / "data"
#: per-node directory under the node's workdir: <workdir>/catalog/
NODE_FILES_DIR = "catalog"
#: launcher settings whose value is a catalog data file shipped to the nodes
FILE_KEYS = ("bert_config",)

#: the dimensions a BERT config must have for the model a suite claims (Devlin et al., table of sizes)
BERT_DIMS: dict[str, dict[str, int]] = {
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512},
    "bert-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                   "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512},
}


def data_dirs(suite_source: str = "") -> list[Path]:
    dirs = []
    if suite_source:
        dirs.append(Path(suite_source).resolve().parent / "data")
    dirs.append(BUILTIN_DATA_DIR)
    return dirs


def find_data_file(name: str, suite_source: str = "") -> Path:
    """The catalog data file ``name`` (a plain file name, no directories)."""
    if not name or "/" in name or "\\" in name or name.startswith(".") or name != posixpath.basename(name):
        raise CatalogError(f"catalog data file {name!r} must be a plain file name (no directories)")
    for d in data_dirs(suite_source):
        p = d / name
        if p.is_file():
            return p
    raise CatalogError(f"catalog data file {name!r} not found in {', '.join(str(d) for d in data_dirs(suite_source))}")


def bert_config_dims(data: bytes, where: str) -> dict[str, int]:
    """The dimensions of a BERT config JSON (keys of :data:`BERT_DIMS`); CatalogError if unreadable."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise CatalogError(f"{where}: not a JSON BERT config ({exc})") from None
    keys = BERT_DIMS["bert-base"].keys()
    if not isinstance(doc, dict) or any(not isinstance(doc.get(k), int) for k in keys):
        raise CatalogError(f"{where}: a BERT config needs integer {', '.join(keys)}")
    return {k: doc[k] for k in keys}


def bert_model_of(dims: dict[str, int]) -> str | None:
    """``bert-base`` / ``bert-large`` when ``dims`` are exactly one of them, else None."""
    return next((name for name, want in BERT_DIMS.items() if all(dims.get(k) == v for k, v in want.items())), None)


def check_bert_config(model: str, dims: dict[str, int], where: str) -> None:
    """The config must be the model the suite claims (BERT-large under a bert-base suite is refused)."""
    want = BERT_DIMS.get(model)
    if want is None:
        return
    wrong = [f"{k} {dims.get(k)} (want {v})" for k, v in want.items() if dims.get(k) != v]
    if wrong:
        actual = bert_model_of(dims) or "an unknown size"
        raise CatalogError(f"{where} describes {actual}, not the suite's model {model}: {'; '.join(wrong)}")


def node_files_dir(node_workdir: str, suite_id: str = "") -> str:
    """Host directory of the catalog files on a node: ``<workdir>/catalog`` (one directory for every
    suite, so a suite copied under another id mounts the same path). Prepare runs WITHOUT the node's
    lease, so another run's trial may be reading a file while it is rewritten: ``SSHPool.put_bytes``
    replaces it atomically (temporary file + rename). ``suite_id`` is accepted and unused."""
    return posixpath.join(node_workdir.rstrip("/") or "/", NODE_FILES_DIR)


def launch_metadata(suite) -> dict[str, Any]:
    """What the result's run metadata records about the model and method (``run.launch``):
    the BERT config shipped (file and dimensions), the optimizer, max_iter and the
    accumulation values the suite sweeps."""
    launcher = suite.launcher or {}
    meta: dict[str, Any] = {"model": suite.model}
    name = launcher.get("bert_config")
    if name:
        data = find_data_file(str(name), suite.source).read_bytes()
        dims = bert_config_dims(data, str(name))
        meta["bert_config"] = {"file": str(name), "path": container_path(str(name)),
                               "model": bert_model_of(dims), **dims}
    for key in ("optimizer", "max_iter"):
        if launcher.get(key) is not None:
            meta[key] = launcher[key]
    if getattr(suite, "accumulation_steps", ()):
        meta["gradient_accumulation_steps"] = list(suite.accumulation_steps)
    return meta
