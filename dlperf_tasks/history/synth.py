"""Synthetic nightly runs with realistic noise, for tests, benchmarks and demos.

No GPU is needed to exercise the history code: :func:`nightly_results` builds result JSONs
through the real aggregation path (:func:`dlperf_tasks.stats.aggregate` and
:func:`dlperf_tasks.report.result_json.build_result`) from trial speeds drawn around the
DLPerf MXNet BERT-base medians (seed 000), with per-trial noise (default 1.5 %) and a small
per-night offset (default 0.5 %). Regressions are planted by multiplying one cell's trial
speeds in one run (``plant={run_index: {cell_id: factor}}``).
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any, Mapping

from dlperf_tasks.model import Cell, MetricKind, Trial, TrialMetric, TrialResult, TrialStatus, Window
from dlperf_tasks.topology import Topology

SUITE = "mxnet-bert"
FRAMEWORK = "mxnet_bert"
MODEL = "bert-base"
# median samples/s per (batch size, topology), after seed 000 (MXNet BERT-base, fp32)
SPEEDS: dict[int, dict[str, float]] = {
    32: {"1n1g": 127.05, "1n8g": 928.03, "2n8g": 1615.06, "4n8g": 3043.63},
    24: {"1n1g": 117.08, "1n8g": 853.48, "2n8g": 1489.91, "4n8g": 2856.49},
}
BASE_ENV = {"driver": "535.104.05", "cuda": "12.2", "nccl": "2.18.5", "transport": "IB",
            "hostname_count": 4}
BASE_DIGEST = "sha256:" + "a1" * 32


def make_cell(bz: int, topo: str, precision: str = "fp32") -> Cell:
    return Cell(suite=SUITE, framework=FRAMEWORK, model=MODEL, precision=precision,
                batch_size_per_device=bz, topology=Topology.parse(topo), window=Window())


def cell_ids(precision: str = "fp32") -> list[str]:
    return [make_cell(bz, t, precision).id for bz, topos in SPEEDS.items() for t in topos]


def one_result(run_index: int, *, date: dt.date, rng: random.Random, trials: int = 7,
               trial_noise: float = 0.015, night_noise: float = 0.005,
               factors: Mapping[str, float] | None = None, env: Mapping[str, Any] | None = None,
               image_digest: str = BASE_DIGEST, noisy_cells: Mapping[str, float] | None = None) -> dict:
    """One nightly result JSON. ``factors``: cell_id -> multiplier of its trial speeds;
    ``noisy_cells``: cell_id -> per-night noise (relative sigma) replacing ``night_noise``."""
    from dlperf_tasks.report.result_json import build_result
    from dlperf_tasks.stats import aggregate

    factors = factors or {}
    noisy_cells = noisy_cells or {}
    results = []
    night = rng.gauss(1.0, night_noise)
    for bz, topos in SPEEDS.items():
        for topo, speed in topos.items():
            cell = make_cell(bz, topo)
            f = factors.get(cell.id, 1.0)
            cell_night = rng.gauss(1.0, noisy_cells[cell.id]) if cell.id in noisy_cells else night
            for i in range(1, trials + 1):
                v = speed * cell_night * f * rng.gauss(1.0, trial_noise)
                results.append(TrialResult(trial=Trial(cell, i), status=TrialStatus.OK,
                                           metric=TrialMetric(value=v, kind=MetricKind.THROUGHPUT),
                                           nodes=[f"node{n + 1}" for n in range(cell.topology.nodes)]))
    started = dt.datetime.combine(date, dt.time(1, 0), tzinfo=dt.timezone.utc)
    run = {
        "run_id": f"{date.isoformat()}-nightly-{run_index:04d}",
        "suite": SUITE, "framework": FRAMEWORK, "dag_run_id": f"scheduled__{started.isoformat()}",
        "started_at": started.isoformat(), "finished_at": (started + dt.timedelta(hours=3)).isoformat(),
        "image": "nvcr.io/nvidia/mxnet:20.03-py3", "image_digest": image_digest,
        "upstream_commit": "4e0d1a7", "cluster": {"nodes": [{"name": f"node{n}", "gpus": 8} for n in range(1, 5)]},
        "env": dict(env or BASE_ENV),
    }
    return build_result(aggregate(results), run)


def nightly_results(n: int, *, start: dt.date = dt.date(2026, 1, 1), seed: int = 7,
                    plant: Mapping[int, Mapping[str, float]] | None = None,
                    env_changes: Mapping[int, Mapping[str, Any]] | None = None,
                    digest_changes: Mapping[int, str] | None = None, **kw: Any) -> list[dict]:
    """``n`` consecutive nightly results (run index 0 .. n-1, one per day from ``start``)."""
    rng = random.Random(seed)
    plant, env_changes, digest_changes = plant or {}, env_changes or {}, digest_changes or {}
    out = []
    for i in range(n):
        env = dict(BASE_ENV)
        env.update(env_changes.get(i, {}))
        out.append(one_result(i, date=start + dt.timedelta(days=i), rng=rng, factors=plant.get(i),
                              env=env, image_digest=digest_changes.get(i, BASE_DIGEST), **kw))
    return out


def summary_of(result: Mapping[str, Any], status: str | None = None) -> dict:
    """The store's index row of ``result`` (:func:`dlperf_tasks.store.index.run_summary`), for
    in-memory tests; ``status`` overrides the derived run status."""
    from dlperf_tasks.store.index import run_summary

    run = result["run"]
    date = (run.get("started_at") or "")[:10]
    s = run_summary(result, f"runs/{run['suite']}/{date}/{run['run_id']}", date)
    if status is not None:
        s["status"] = status
    return s


def seed_store(store: Any, results: list[dict], workdir: str, *, plots_for_last: int = 0,
               report: bool = False) -> list[str]:
    """Publish ``results`` into ``store`` through the real publish path (one run directory
    each under ``workdir``: ``result.json``, optional ``plots/*.png`` for the last
    ``plots_for_last`` runs and ``report.md``). Returns the run ids."""
    from pathlib import Path

    from dlperf_tasks.report.result_json import write_result

    ids = []
    for i, res in enumerate(results):
        run_dir = Path(workdir) / res["run"]["run_id"]
        write_result(res, run_dir / "result.json")
        if plots_for_last and i >= len(results) - plots_for_last:
            from dlperf_tasks.report.plots import render_plots

            render_plots(res, run_dir / "plots")
        if report:
            from dlperf_tasks.report.markdown import render_markdown

            (run_dir / "report.md").write_text(render_markdown(res))
        store.publish(run_dir)
        ids.append(res["run"]["run_id"])
    return ids
