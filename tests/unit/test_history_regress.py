"""Regression detection on synthetic nightly runs (per-trial noise 1.5 %, per-night 0.5 %),
built through the real aggregation path (stats.aggregate + result_json.build_result)."""

import pytest

from tests.fixtures import synth
from dlperf_tasks.history.regress import INSUFFICIENT, NOISY, REGRESSION, RegressConfig, detect
from dlperf_tasks.history.robust import mad, mann_whitney_u, median
from dlperf_tasks.history.runs import RunView

T_CELL = "mxnet-bert/bz24/fp32/1n1g"  # planted 6 % throughput drop
S_CELL = "mxnet-bert/bz32/fp32/4n8g"  # planted 6 % drop of throughput with 1n1g unchanged = speedup drop


def views(results):
    return [RunView.from_summary(synth.summary_of(r)) for r in results]


@pytest.fixture(scope="module")
def planted():
    rs = synth.nightly_results(31, plant={30: {T_CELL: 0.94, S_CELL: 0.94}},
                               env_changes={30: {"nccl": "2.19.3"}}, digest_changes={30: "sha256:" + "b2" * 32})
    return rs


def test_planted_drops_found_with_right_kind_and_nothing_else(planted):
    v = views(planted)
    report = detect(RunView.from_result(planted[-1]), v[:-1])
    got = {(f.kind, f.cell_id) for f in report.findings}
    assert got == {("throughput", T_CELL), ("scaling", S_CELL)}
    by = {f.cell_id: f for f in report.findings}
    assert -8 < by[T_CELL].delta_pct < -4
    assert -8 < by[S_CELL].delta_pct < -4
    assert by[S_CELL].p_value < 0.01 and by[T_CELL].p_value < 0.01
    # env diff against the most recent baseline run
    assert by[S_CELL].env_diff["nccl"] == {"baseline": "2.18.5", "current": "2.19.3"}
    assert by[S_CELL].env_diff["image_digest"]["current"] == "sha256:" + "b2" * 32
    assert by[S_CELL].baseline_run == planted[-2]["run"]["run_id"]
    assert len(by[S_CELL].baseline_runs) == 20
    d = report.to_dict()
    assert {f["kind"] for f in d["findings"]} == {"throughput", "scaling"}
    assert d["checked_cells"] == 8
    assert "communication" in by[S_CELL].note


def test_current_run_in_history_list_is_ignored(planted):
    v = views(planted)  # history includes the current run itself (as the index does after publish)
    report = detect(v[-1], v)
    assert {(f.kind, f.cell_id) for f in report.findings} == {("throughput", T_CELL), ("scaling", S_CELL)}


def test_clean_history_flags_nothing():
    for seed in (1, 2, 3):
        v = views(synth.nightly_results(31, seed=seed))
        for i in range(20, 31):
            rep = detect(v[i], v[:i])
            assert rep.findings == [], rep.summary_lines()


def test_small_drop_below_min_effect_not_flagged():
    rs = synth.nightly_results(31, plant={30: {S_CELL: 0.98}})
    v = views(rs)
    assert detect(v[-1], v[:-1]).findings == []


def test_whole_group_compute_drop_is_throughput_not_scaling():
    group = [c for c in synth.cell_ids() if "/bz32/" in c]
    rs = synth.nightly_results(31, plant={30: {c: 0.93 for c in group}})
    v = views(rs)
    rep = detect(v[-1], v[:-1])
    assert {(f.kind, f.cell_id) for f in rep.findings} == {("throughput", c) for c in group}


def test_scaling_drop_with_faster_1n1g_is_scaling_only():
    # 1n1g 8 % faster, multi-GPU cells unchanged: speedups drop ~7.5 %, throughput does not
    rs = synth.nightly_results(31, plant={30: {"mxnet-bert/bz32/fp32/1n1g": 1.08}})
    v = views(rs)
    rep = detect(v[-1], v[:-1])
    assert {f.kind for f in rep.findings} == {"scaling"}
    assert {f.cell_id for f in rep.findings} == {f"mxnet-bert/bz32/fp32/{t}" for t in ("1n8g", "2n8g", "4n8g")}


def test_noisy_cell_reported_as_noisy_not_flagged():
    noisy = {S_CELL: 0.08}  # 8 % night-to-night noise on this cell
    rs = synth.nightly_results(31, plant={30: {S_CELL: 0.85}}, noisy_cells=noisy, seed=4)
    v = views(rs)
    rep = detect(v[-1], v[:-1])
    assert all(f.cell_id != S_CELL for f in rep.findings)
    assert any(n.cell_id == S_CELL and n.status == NOISY for n in rep.noisy)
    assert "history CV" in rep.noisy[0].note


def test_insufficient_history():
    v = views(synth.nightly_results(4, plant={3: {T_CELL: 0.8}}))
    rep = detect(v[-1], v[:-1], RegressConfig(min_history=5))
    assert rep.findings == []
    assert all(x.status == INSUFFICIENT for x in rep.verdicts)
    assert T_CELL in rep.to_dict()["insufficient_history"]


def test_failed_runs_and_later_runs_are_not_history(planted):
    v = views(planted)
    bad = [RunView.from_summary(synth.summary_of(r, status="failed")) for r in planted[:25]]
    rep = detect(v[-1], bad + v[25:30], RegressConfig(min_history=6))
    assert all(x.status == INSUFFICIENT for x in rep.verdicts)
    # a later run never serves as baseline for an earlier one
    rep = detect(v[10], v[11:])
    assert all(x.status == INSUFFICIENT for x in rep.verdicts)


def test_latency_rise_is_a_regression():
    def run(i, vals):
        return RunView.from_summary({"run_id": f"r{i:03d}", "suite": "megatron", "date": f"2026-02-{i + 1:02d}",
                                     "status": "ok", "env": {},
                                     "cells": {"megatron/bz8/fp16/DP_1x1x1_2_1536x16/1n1g": {
                                         "median_speed": median(vals), "trial_values": vals,
                                         "metric_kind": "latency", "n_valid": len(vals)}}})
    import random
    rng = random.Random(3)
    hist = [run(i, [200 * rng.gauss(1, 0.01) for _ in range(5)]) for i in range(20)]
    cur = run(25, [200 * 1.08 * rng.gauss(1, 0.01) for _ in range(5)])
    rep = detect(cur, hist)
    assert [(f.kind, f.status) for f in rep.findings] == [("throughput", REGRESSION)]
    assert rep.findings[0].delta_pct > 5
    # latency cells have no scaling test
    assert {x.kind for x in rep.verdicts} == {"throughput"}
    faster = run(26, [200 * 0.9 * rng.gauss(1, 0.01) for _ in range(5)])
    assert detect(faster, hist).findings == []


def test_config_validation():
    with pytest.raises(ValueError, match="alpha"):
        RegressConfig(alpha=2)
    with pytest.raises(ValueError, match="history_runs"):
        RegressConfig(history_runs=0)


def test_robust_helpers_match_known_values():
    assert median([3, 1, 2]) == 2
    assert mad([1, 2, 3, 4, 100]) == pytest.approx(1.4826)
    # scipy.stats.mannwhitneyu([1,2,3,4,5],[6,7,8,9,10], method="asymptotic") -> U=0, p=0.0121858
    # (mu=12.5, sigma=sqrt(25*11/12)=4.787, z=(12.5-0.5)/4.787=2.5067)
    u, p = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert u == 0 and p == pytest.approx(0.0121858, rel=1e-4)
    u, p = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], "less")
    assert p == pytest.approx(0.0060929, rel=1e-4)
    u, p = mann_whitney_u([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], "less")
    assert u == 25 and p > 0.99
    # ties (two groups of 3): ranks of x = 1,3,3,6,8 -> U=6; var = 25/12*(11 - 48/90) = 21.806
    # z = (6.5-0.5)/4.6697 = 1.2849 -> two-sided p = 0.19883
    u, p = mann_whitney_u([1, 2, 2, 3, 4], [2, 3, 3, 5, 6])
    assert u == 6.0 and p == pytest.approx(0.19883, rel=1e-3)
    assert mann_whitney_u([1, 1], [1, 1]) == (2.0, 1.0)
    with pytest.raises(ValueError):
        mann_whitney_u([], [1])
