"""Links between an Airflow run and its results, and the run note with the headline table
(pure: the Airflow layer passes the base URLs).

- :func:`dag_run_url`, :func:`task_url`: the Airflow UI's pages of a DAG run and of one task
  of it (the task page opens on its logs): ``<base>/dags/<dag>/runs/<run>[/tasks/<task>]``;
- :func:`results_url`: the results page of one dlperf run: ``<base>/dlperf/runs/<run_id>``;
- :func:`dag_run_results_url`: the results of one DAG run (the publish task's extra link);
- :func:`run_note`: Markdown for the DAG run's note (Airflow shows it in the grid): per
  published run the headline table (cell, median, speedup, valid/invalid trials, noisy flag)
  and the link to its results page.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping
from urllib.parse import quote

from dlperf_tasks.report.flags import flags_text

RESULTS_PREFIX = "/dlperf"
MAX_NOTE_CELLS = 12


def _q(part: str) -> str:
    return quote(str(part), safe="")


def dag_run_url(base: str, dag_id: str, dag_run_id: str) -> str:
    return f"{base.rstrip('/')}/dags/{_q(dag_id)}/runs/{_q(dag_run_id)}"


def task_url(base: str, dag_id: str, dag_run_id: str, task_id: str) -> str:
    return f"{dag_run_url(base, dag_id, dag_run_id)}/tasks/{_q(task_id)}"


def results_url(base: str, run_id: str, prefix: str = RESULTS_PREFIX) -> str:
    return f"{base.rstrip('/')}{prefix}/runs/{_q(run_id)}"


def dag_run_results_url(base: str, dag_id: str, dag_run_id: str, prefix: str = RESULTS_PREFIX) -> str:
    """The results of one DAG run (the results app redirects to the run's page)."""
    return f"{base.rstrip('/')}{prefix}/dag-runs/{_q(dag_id)}/{_q(dag_run_id)}"


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "-" if not math.isfinite(v) else (f"{v:.2f}" if abs(v) >= 10 else f"{v:.3g}")
    return str(v)


def cell_label(c: Mapping[str, Any]) -> str:
    """A cell as the note names it: ``1n1g bz8 fp32`` from a result cell's fields, else its id
    without the suite (the aggregate summaries carry only ``cell_id``: ``smoke/bz8/fp32/1n1g``)."""
    if c.get("topology") and c.get("batch_size_per_device") is not None:
        return " ".join(str(p) for p in (c["topology"], f"bz{c['batch_size_per_device']}", c.get("precision")) if p)
    cid = str(c.get("cell_id") or "?")
    return cid.split("/", 1)[1] if cid.count("/") >= 3 else cid


def headline_table(cells: Iterable[Mapping[str, Any]], limit: int = MAX_NOTE_CELLS) -> list[str]:
    """Markdown table lines of result cells (``median_speed``, ``speedup``, ``n_valid``...)."""
    cells = list(cells)
    lines = ["| cell | median | unit | speedup | valid/invalid | |", "| --- | ---: | --- | ---: | ---: | --- |"]
    for c in cells[:limit]:
        flag = flags_text(c)
        lines.append(f"| {cell_label(c)} | {_num(c.get('median_speed'))} | {c.get('unit') or ''} | "
                     f"{_num(c.get('speedup'))} | {c.get('n_valid') or 0}/{c.get('n_invalid') or 0} | {flag} |")
    if len(cells) > limit:
        lines.append(f"| ... {len(cells) - limit} more cell(s) | | | | | |")
    return lines


def run_note(published: Iterable[Mapping[str, Any]], base_url: str) -> str:
    """The DAG run's note. ``published``: one dict per run with ``run_id``, ``suite`` and
    ``cells`` (result cells or the aggregate summaries' cells), optional ``regressions``
    (``{findings, cells}``) and ``error``. ``base_url``: the api-server's ``[api] base_url``."""
    out = []
    for p in published:
        rid = str(p.get("run_id"))
        out.append(f"**{p.get('suite')}** run `{rid}`: [results]({results_url(base_url, rid)})")
        reg = p.get("regressions") or {}
        if reg.get("basis_line"):
            out.append(f"regression check: {reg['basis_line']}")
        if reg.get("findings"):
            out.append(f"**{reg['findings']} regression finding(s)**: {', '.join(reg.get('cells') or [])}")
        if p.get("error"):
            out.append(f"error: {p['error']}")
        out += [""] + headline_table(p.get("cells") or []) + [""]
    return "\n".join(out).strip() + "\n" if out else "no run published\n"
