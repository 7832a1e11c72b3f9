"""One module per DAG in ``dags/``, so a broken suite is an import error of its own DAG only.

``dags/dlperf_<group>.py`` (mxnet, pytorch, tensorflow, megatron, smoke) each build the DAG of
their group; ``dags/dlperf_dags.py`` builds every other group (site suites in
``$DLPERF_CATALOG_PATH`` with a ``dag:`` of their own). A suite file that does not load makes
the module of ITS group raise a :class:`~dlperf_tasks.errors.CatalogError` naming the file, line
and key: Airflow records that as the module's import error (shown in the UI's "DAG Import
Errors"), and every other DAG still loads. A broken file whose group cannot be told (no
readable ``dag:`` line, not overriding a built-in suite) is an import error of ``dlperf_dags.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from dlperf_tasks.airflow import dag_factory
from dlperf_tasks.errors import CatalogError

CATCH_ALL = "dlperf_dags"


def _own_modules(folder: Path) -> set[str]:
    """Groups that have a module of their own in the dags folder."""
    return {p.stem.removeprefix(dag_factory.DAG_PREFIX) for p in folder.glob(f"{dag_factory.DAG_PREFIX}*.py")
            if p.stem != CATCH_ALL}


def build_module(module_file: str | os.PathLike, cfg=None) -> dict:
    """The DAGs of the dags/ module ``module_file`` (see module docstring); raises
    CatalogError when a suite of its group is broken."""
    from dlperf_tasks.catalog.loader import suites_by_group

    path = Path(module_file)
    groups, broken = suites_by_group()
    if path.stem == CATCH_ALL:
        own = _own_modules(path.parent)
        selected = sorted((set(groups) | {g for g in broken if g}) - own)
        errors = [e for g in selected for e in broken.get(g, [])] + broken.get(None, [])
    else:
        selected = [path.stem.removeprefix(dag_factory.DAG_PREFIX)]
        errors = broken.get(selected[0], [])
    if errors:
        dags = ", ".join(f"{dag_factory.DAG_PREFIX}{g}" for g in selected) or "(none)"
        raise CatalogError("\n".join(str(e) for e in errors)
                           + f"\nDAG(s) {dags} not loaded until the suite file(s) above are fixed; "
                             f"the other dlperf DAGs are unaffected")
    if not any(g in groups for g in selected):
        return {}
    cfg = cfg or dag_factory.settings_mod.load()
    return {f"{dag_factory.DAG_PREFIX}{g}": dag_factory.build_dag(g, groups[g], cfg) for g in selected if g in groups}
