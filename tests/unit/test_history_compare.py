"""Honest comparisons: 3 trials against 3 CAN show a change when the cell's
history is the noise model; the interval and the detectable change are reported; the data
that cannot decide says so; the regression check reports the same; noisy cells are flagged."""

import random

import pytest

from tests.fixtures import synth
from dlperf_tasks.history.compare import compare_runs
from dlperf_tasks.history.interval import (Noise, detectable_change, median_diff_interval, noise_from_history,
                                           noise_from_pair, t_quantile)
from dlperf_tasks.history.regress import detect
from dlperf_tasks.history.robust import mann_whitney_u
from dlperf_tasks.history.rows import compare_rows, show_rows, verdict_note
from dlperf_tasks.history.runs import RunView

S_CELL = "mxnet-bert/bz32/fp32/4n8g"


def test_t_quantiles_match_tables():
    for df, q in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert t_quantile(0.975, df) == pytest.approx(q, abs=2e-3)
    assert t_quantile(0.025, 4) == pytest.approx(-2.776, abs=2e-3)


def _history(n_runs=20, trials=3, noise=0.015, night=0.005, seed=3, base=100.0):
    rng = random.Random(seed)
    out = []
    for _ in range(n_runs):
        k = base * rng.gauss(1, night)
        out.append([k * rng.gauss(1, noise) for _ in range(trials)])
    return out


def test_three_vs_three_fully_separated_is_detected_where_the_rank_test_cannot():
    a, b = [99.0, 100.0, 101.0], [111.0, 112.0, 113.0]  # +12 %, fully separated
    _, p = mann_whitney_u(b, a, "two-sided")
    assert p > 0.05  # the old method: "same", whatever the data
    noise = noise_from_history(_history())
    assert noise is not None and 0.01 < noise.within < 0.02 and noise.source == "history (20 runs)"
    iv = median_diff_interval(a, b, noise)
    assert iv.verdict == "faster" and iv.lo > 0.05 and iv.hi < 0.2
    assert 0.02 < iv.mde < 0.07  # what 3 vs 3 trials can see at 1.5 % trial noise


def test_undecided_when_the_interval_reaches_past_the_tolerance():
    noisy = Noise(within=0.05, between=0.0, df=40, source="history (20 runs)")
    iv = median_diff_interval([100, 101, 99], [101, 102, 100], noisy)
    assert iv.verdict == "undecided" and iv.lo < 0 < iv.hi and iv.mde > 0.1
    quiet = Noise(within=0.003, between=0.0, df=40, source="history (20 runs)")
    assert median_diff_interval([100, 100.2, 99.8], [100.1, 100.3, 99.9], quiet).verdict == "same"
    # more trials, smaller detectable change
    assert detectable_change(10, 10, noisy) < detectable_change(3, 3, noisy)
    # no history and a single trial on each side: no noise estimate at all
    assert noise_from_pair([100.0], [101.0]) is None
    assert median_diff_interval([100.0], [101.0], None) is None


def test_latency_cells_get_the_right_direction():
    q = Noise(within=0.01, between=0.0, df=40, source="h", run_sd=0.01, runs=10)
    assert median_diff_interval([100, 101, 99], [120, 121, 119], q, higher_is_better=False).verdict == "slower"


def test_compare_runs_uses_history_and_reports_the_interval():
    results = synth.nightly_results(12, trials=3, plant={11: {S_CELL: 1.12}})
    views = [RunView.from_result(r) for r in results]
    doc = compare_runs(views[10], views[11], views)
    by = {c["cell_id"]: c for c in doc["cells"]}
    c = by[S_CELL]
    assert c["verdict"] == "faster" and c["n_a"] == c["n_b"] == 3
    assert c["ci_pct"][0] > 0 and c["mde_pct"] > 0 and c["noise_source"].startswith("history")
    rows = {r["cell_id"]: r for r in compare_rows(doc)}
    assert rows[S_CELL]["ci_pct"].startswith("[+") and rows[S_CELL]["verdict"] == "faster"
    # without history the same pair is judged from its own 6 trials, and says so
    alone = {c["cell_id"]: c for c in compare_runs(views[10], views[11])["cells"]}
    assert alone[S_CELL]["noise_source"] == "these two runs (no history)"


def test_verdict_note_says_plainly_when_data_cannot_decide():
    results = synth.nightly_results(6, trials=2, trial_noise=0.06)
    views = [RunView.from_result(r) for r in results]
    doc = compare_runs(views[4], views[5], views)
    assert doc["verdicts"].get("undecided")
    note = verdict_note(doc)
    assert "cannot be decided with these trial counts" in note and "run more trials" in note


def test_regression_check_reports_interval_and_detectable_change():
    results = synth.nightly_results(12, trials=3, plant={11: {S_CELL: 0.90}})
    views = [RunView.from_result(r) for r in results]
    rep = detect(views[11], views[:11])
    f = next(v for v in rep.findings if v.cell_id == S_CELL)
    assert f.ci_pct is not None and f.ci_pct[1] < 0 and f.mde_pct and f.mde_pct < 10
    assert "detectable" in "\n".join(rep.summary_lines())
    # 2 trials a run at 6 % trial noise: the check says it cannot decide
    few = synth.nightly_results(8, trials=2, trial_noise=0.06)
    rep = detect(RunView.from_result(few[7]), [RunView.from_result(r) for r in few[:7]])
    assert any(v.status == "undecided" for v in rep.verdicts)
    assert rep.to_dict()["undecided"]


def test_noisy_cell_flagged_in_table():
    res = synth.nightly_results(1)[0]
    res["cells"][0]["cv"] = 0.42
    rows = show_rows(res)
    assert rows[0]["noisy"] is True and all(not r["noisy"] for r in rows[1:])
