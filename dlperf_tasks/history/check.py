"""The regression check of the publish step: read history, detect, record, notify.

``check_run(store, run_id)`` reads the run's result JSON and its suite's index (one read),
runs :func:`dlperf_tasks.history.regress.detect` and the loss sanity check
(:mod:`dlperf_tasks.history.loss`: a cell whose final loss is outside its history's band is a
finding of kind ``loss``, status "fast but wrong?"), then

- records the report as the run's ``regressions`` annotation (store.annotate_run) and a badge in the suite
  index row (``record=True``; see :func:`record_report`),
- writes the human-readable summary to ``log`` (a ``logging.Logger``; the Airflow task log),
- calls :func:`dlperf_tasks.history.notify.notify` when there are findings (target argument,
  else ``$DLPERF_NOTIFY_URL`` if ``notify_default``). A failing notification is logged, not raised.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dlperf_tasks.core.errors import DlperfError, StoreError
from dlperf_tasks.history.notify import NotifyError, notify
from dlperf_tasks.history.regress import RegressConfig, RegressionReport, detect
from dlperf_tasks.history.runs import RunView
from dlperf_tasks.store import layout as L
from dlperf_tasks.store.backends import sha256_bytes
from dlperf_tasks.store.index import update_index
from dlperf_tasks.history.loss import FLAG, loss_verdicts
from dlperf_tasks.history.confirm import notify_only_confirmed
from dlperf_tasks.report.flags import flags_text

MANIFEST_KEY = "regressions"
_log = logging.getLogger("dlperf.history")


def index_badge(report: RegressionReport) -> dict[str, Any]:
    """The short form kept in the suite index row (``regressions``), so listings and the web
    page show flagged runs without reading every manifest."""
    b = report.basis
    return {"findings": len(report.findings), "noisy": len(report.noisy),
            "cells": sorted({f"{v.kind}:{v.cell_id}" for v in report.findings}),
            "judged": b["judged"], "not_judged": b["not_judged"]}


def record_report(store: Any, run_id: str, report: RegressionReport) -> None:
    """Store the report in the run's manifest (key ``regressions``; the object list and its
    checksums are untouched) and a short badge in the suite index row.

    Uses ``store.annotate_run(run_id, key, value)`` when the store offers it; otherwise the
    store's own primitives: :meth:`Store.read_manifest`/``run_key`` (layout owned by the store)
    and :func:`dlperf_tasks.store.index.update_index` (optimistic concurrency)."""
    annotate = getattr(store, "annotate_run", None)
    if annotate is not None:
        annotate(run_id, MANIFEST_KEY, report.to_dict(), index_value=index_badge(report))
        return
    manifest = store.read_manifest(run_id)
    manifest[MANIFEST_KEY] = report.to_dict()
    data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    store.backend.put_bytes(store.run_key(run_id, L.MANIFEST), data, sha256=sha256_bytes(data),
                            content_type="application/json")
    loc = store.locate(run_id)
    row = next((r for r in store.read_index(loc["suite"])["runs"] if r.get("run_id") == run_id), None)
    if row is None:
        raise StoreError(f"run {run_id} is not in the index of suite {loc['suite']}")
    row = dict(row, regressions=index_badge(report))
    update_index(store.backend, store.layout.index_key(loc["suite"]), row)


def read_recorded(store: Any, run_id: str, manifest: dict | None = None) -> dict | None:
    """The regression report recorded for ``run_id``: the store's annotation when it has one,
    else the ``regressions`` key of an older manifest; None when the run was never checked."""
    reader = getattr(store, "read_annotation", None)
    if reader is not None:
        doc = reader(run_id, MANIFEST_KEY)
        if doc is not None:
            return doc
    if manifest is None:
        manifest = store.read_manifest(run_id)
    return (manifest or {}).get(MANIFEST_KEY)


def add_loss_verdicts(report: RegressionReport, result: dict, rows: list[dict]) -> None:
    """The loss sanity verdicts (history/loss.py): out of band = a finding "fast but wrong?"."""
    found = loss_verdicts(result, rows)
    report.verdicts.extend(found)
    report.findings.extend(v for v in found if v.status == FLAG)
    report.findings.sort(key=lambda v: (v.kind, v.cell_id))


def run_flags(result: dict) -> dict[str, str]:
    """The flags of the run's cells (report/flags.py's one wording), by cell id; unflagged cells left out."""
    return {str(c.get("cell_id")): text for c in result.get("cells") or [] if isinstance(c, dict)
            for text in [flags_text(c)] if text}


def check_run(store: Any, run_id: str, config: RegressConfig | None = None, *, record: bool = True,
              notify_target: str | None = None, notify_default: bool = True,
              log: logging.Logger | None = _log) -> RegressionReport:
    result = store.read_result(run_id)
    current = RunView.from_result(result)
    rows = store.list_runs(suite=current.suite)
    report = detect(current, [RunView.from_summary(s) for s in rows], config)
    add_loss_verdicts(report, result, rows)
    report.cell_flags = run_flags(result)
    if log is not None:
        for line in report.summary_lines():
            (log.warning if report.findings else log.info)(line)
    if record:
        record_report(store, run_id, report)
    target = notify_target if notify_target is not None else (None if notify_default else "")

    if notify_only_confirmed():  # DLPERF_NOTIFY_ON=confirmed: only A/B-confirmed findings are sent (confirm.py)
        target = ""
    try:
        sent = notify(report.to_dict(), target)
        if sent and log is not None:
            log.info("regression findings of %s sent", run_id)
    except (NotifyError, DlperfError) as exc:
        if log is not None:
            log.error("could not send the regression notification: %s", exc)
    return report
