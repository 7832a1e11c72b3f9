"""History on an LLM suite: a cell's figure is tokens/s per GPU (the job's tokens/s over its GPUs),
from a full result and from the store's index row alike; the regression check and compare judge
it, built through the real aggregation path (stats.aggregate + result_json.build_result)."""

from __future__ import annotations

import random

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.catalog.plan import plan
from dlperf_tasks.core.model import MetricKind, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.history.compare import compare_cells
from dlperf_tasks.history.regress import REGRESSION, detect
from dlperf_tasks.history.runs import RunView
from dlperf_tasks.measure.stats import aggregate
from dlperf_tasks.report.result_json import build_result
from tests.fixtures import synth


def _cell(topology: str):
    suite = load_suite("llama31-8b-megatron-bridge")
    return next(t.trial.cell for t in plan(suite, {"trials": 1}).trials
                if t.trial.cell.topology.name == topology and t.trial.cell.precision == "bf16")


def _result(night: int, per_gpu: dict[str, float], rng: random.Random) -> dict:
    trials = []
    for topo, tps in per_gpu.items():
        cell = _cell(topo)
        for i in range(3):
            v = tps * (1 + rng.gauss(0, 0.01)) * (1 + rng.gauss(0, 0.003))
            m = TrialMetric(value=v * cell.topology.world_size, kind=MetricKind.THROUGHPUT,
                            details={"unit": "tokens/s", "tokens_per_sec_per_gpu": v})
            trials.append(TrialResult(trial=Trial(cell, i), status=TrialStatus.OK, metric=m))
    return build_result(aggregate(trials), {"run_id": f"llm-{night:02d}", "suite": "llama31-8b-megatron-bridge",
                                            "started_at": f"2026-11-{night:02d}T02:00:00+00:00"})


def test_a_cells_figure_is_tokens_per_second_per_gpu_in_results_and_index_rows():
    res = _result(1, {"1n8g": 7000.0, "2n8g": 6800.0}, random.Random(1))
    cell = next(c for c in res["cells"] if c["topology"] == "2n8g")
    assert cell["unit"] == "tokens/s" and cell["median_speed"] == pytest.approx(6800 * 16, rel=0.05)
    for view in (RunView.from_result(res), RunView.from_summary(synth.summary_of(res))):
        cv = view.cells[cell["cell_id"]]
        assert cv.unit == "tokens/s/GPU" and cv.median == pytest.approx(cell["median_speed"] / 16)
        assert [round(v, 6) for v in cv.values] == [round(t["value"] / 16, 6) for t in cell["trials"]]


def test_the_regression_check_and_compare_judge_tokens_per_gpu():
    rng = random.Random(7)
    nights = [_result(n, {"1n8g": 7000.0, "2n8g": 6800.0}, rng) for n in range(1, 21)]
    current = _result(21, {"1n8g": 7000.0, "2n8g": 6800.0 * 0.92}, rng)  # the 2-node cell 8 % slower
    views = [RunView.from_summary(synth.summary_of(r)) for r in nights]
    report = detect(RunView.from_result(current), views)
    found = {(f.kind, f.cell_id): f for f in report.findings}
    two = next(c["cell_id"] for c in current["cells"] if c["topology"] == "2n8g")
    assert ("throughput", two) in found and found[("throughput", two)].status == REGRESSION
    f = found[("throughput", two)]
    assert f.unit == "tokens/s/GPU" and -11 < f.delta_pct < -5
    assert f.baseline == pytest.approx(6800, rel=0.02) and f.current == pytest.approx(6800 * 0.92, rel=0.02)
    assert not any(cid != two for _, cid in found)  # the unchanged 1-node cell is not flagged
    rows = {r.cell_id: r for r in compare_cells(RunView.from_result(nights[-1]), RunView.from_result(current), views)}
    assert rows[two].unit == "tokens/s/GPU" and rows[two].median_a == pytest.approx(6800, rel=0.03)
    assert rows[two].verdict == "slower" and rows[two].delta_pct == pytest.approx(-8, abs=3)
