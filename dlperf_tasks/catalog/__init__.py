"""Benchmark catalog: one YAML per suite (catalog/suites/*.yaml), validated at load.

    from dlperf_tasks.catalog import load_suite, list_suites
    suite = load_suite("mxnet-bert")          # or a path to a .yaml file
    for s in list_suites(): print(s.id)

Extra suite directories: ``$DLPERF_CATALOG_PATH`` (``:``-separated), searched before the built-in ones.
"""

from dlperf_tasks.catalog.loader import BUILTIN_DIR, list_suites, load_file, load_suite, search_dirs
from dlperf_tasks.catalog.model import ContainerSpec, Patch, Suite, Upstream
from dlperf_tasks.core.catalog_path import ENV_VAR

__all__ = [
    "BUILTIN_DIR", "ENV_VAR", "ContainerSpec", "Patch", "Suite", "Upstream",
    "list_suites", "load_file", "load_suite", "search_dirs",
]
