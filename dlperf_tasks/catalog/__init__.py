"""Benchmark catalog: one YAML per suite (catalog/suites/*.yaml), validated at load.

    from dlperf_tasks.catalog import load_suite, list_suites
    suite = load_suite("mxnet-bert")          # or a path to a .yaml file
    for s in list_suites(): print(s.id)

Extra suite directories: ``$DLPERF_CATALOG_PATH`` (``:``-separated), searched before the built-in ones.
"""

import importlib

from dlperf_tasks.core.catalog_path import ENV_VAR

#: the package's names and the module each comes from, resolved on first use
_FROM = {"BUILTIN_DIR": "dlperf_tasks.catalog.loader", "list_suites": "dlperf_tasks.catalog.loader",
         "load_file": "dlperf_tasks.catalog.loader", "load_suite": "dlperf_tasks.catalog.loader",
         "search_dirs": "dlperf_tasks.catalog.loader",
         "ContainerSpec": "dlperf_tasks.catalog.model", "Patch": "dlperf_tasks.catalog.model",
         "Suite": "dlperf_tasks.catalog.model", "Upstream": "dlperf_tasks.catalog.model"}


def __getattr__(name: str):  # lazy: start-up of dlperf extract (see _FROM)
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_FROM[name]), name)
    return value

__all__ = [
    "BUILTIN_DIR", "ENV_VAR", "ContainerSpec", "Patch", "Suite", "Upstream",
    "list_suites", "load_file", "load_suite", "search_dirs",
]
