"""One module per DAG in ``dags/``, and one more that reports broken suite files.

``dags/dlperf_<group>.py`` (mxnet, pytorch, tensorflow, megatron, smoke) each build the DAG of
their group; ``dags/dlperf_dags.py`` builds every other group (site suites in
``$DLPERF_CATALOG_PATH`` with a ``dag:`` of their own). Every group is built from the suites
that load: a suite file that does not is left out of its group, and a broken site file that
overrides a built-in suite leaves the built-in one in place (catalog/loader.py), so a broken
site file hides only itself, never a built-in DAG. ``dags/dlperf_suite_errors.py`` raises a
:class:`~dlperf_tasks.core.errors.CatalogError` naming every broken file (line and key): Airflow
shows it as that module's import error ("DAG Import Errors"), and no DAG is lost to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from dlperf_tasks.airflow import dag_factory
from dlperf_tasks.core.errors import CatalogError

CATCH_ALL = "dlperf_dags"
ERRORS_MODULE = "dlperf_suite_errors"


def _own_modules(folder: Path) -> set[str]:
    """Groups that have a module of their own in the dags folder."""
    return {p.stem.removeprefix(dag_factory.DAG_PREFIX) for p in folder.glob(f"{dag_factory.DAG_PREFIX}*.py")
            if p.stem not in (CATCH_ALL, ERRORS_MODULE)}


def build_module(module_file: str | os.PathLike, cfg=None) -> dict:
    """The DAGs of the dags/ module ``module_file`` (see module docstring); the errors module
    raises CatalogError naming every broken suite file, and builds no DAG."""
    from dlperf_tasks.catalog.loader import suites_by_group

    path = Path(module_file)
    groups, broken = suites_by_group()
    if path.stem == ERRORS_MODULE:
        errors = [e for g in sorted(broken, key=lambda g: g or "") for e in broken[g]]
        if errors:
            raise CatalogError("\n".join(str(e) for e in errors)
                               + f"\n{len(errors)} suite file(s) above left out until fixed; every dlperf DAG "
                                 f"loads without them")
        return {}
    if path.stem == CATCH_ALL:
        selected = sorted(set(groups) - _own_modules(path.parent))
    else:
        selected = [path.stem.removeprefix(dag_factory.DAG_PREFIX)]
    if not any(g in groups for g in selected):
        return {}
    cfg = cfg or dag_factory.settings_mod.load()
    return {f"{dag_factory.DAG_PREFIX}{g}": dag_factory.build_dag(g, groups[g], cfg) for g in selected if g in groups}
