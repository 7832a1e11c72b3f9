"""Extreme runs never take the statistics down: a run with absurd speeds (1e300, 1e-300) in a
cell's history makes neither ``compare`` nor ``check`` of other runs overflow, a 1000x glitch
run is kept out of the noise estimate (robust statistics), and the printed interval of a real
regression agrees with its verdict."""

from __future__ import annotations

import math
import random

import pytest

from dlperf_tasks.history.interval import median_diff_interval, noise_from_history
from dlperf_tasks.history.regress import REGRESSION, detect
from dlperf_tasks.history.robust import median, typical
from dlperf_tasks.history.runs import RunView

CELL = "mxnet-bert/bz32/fp32/1n8g"


def _run(i: int, vals: list[float]) -> RunView:
    return RunView.from_summary({"run_id": f"r{i:03d}", "suite": "mxnet-bert", "date": f"2026-02-{i + 1:02d}",
                                 "status": "ok", "env": {},
                                 "cells": {CELL: {"median_speed": median(vals), "trial_values": vals,
                                                  "metric_kind": "throughput", "n_valid": len(vals)}}})


def _history(rng: random.Random, n: int = 12) -> list[list[float]]:
    return [[1000 * rng.gauss(1, 0.01) for _ in range(5)] for _ in range(n)]


@pytest.mark.parametrize("glitch", [1e300, 1e-300, 1000.0 * 1000, 1000.0 / 1000])
def test_a_glitch_run_is_kept_out_of_the_noise_estimate(glitch):
    clean = _history(random.Random(5))
    base = noise_from_history(clean)
    with_glitch = noise_from_history(clean[:6] + [[glitch] * 5] + clean[6:])
    assert with_glitch is not None and math.isclose(with_glitch.within, base.within)
    assert math.isclose(with_glitch.run_sd, base.run_sd)
    one_trial = noise_from_history([clean[0][:4] + [glitch]] + clean[1:])  # a glitch trial inside a run
    assert one_trial.within < 2 * base.within


@pytest.mark.parametrize("extreme", [1e300, 1e-300, 1.7e308])
def test_compare_with_an_extreme_run_never_overflows(extreme):
    hist = _history(random.Random(6)) + [[extreme] * 5]
    noise = noise_from_history(hist)
    a = [1000 * x for x in (1.0, 1.01, 0.99)]
    for b in (a, [extreme] * 3, [extreme, 1000, 1001]):
        iv = median_diff_interval(a, b, noise)
        assert iv is not None and iv.lo <= iv.delta <= iv.hi and not math.isnan(iv.hi)
        iv.to_dict()


@pytest.mark.parametrize("glitch", [1e300, 1e-300, 1000.0 * 1000])
def test_check_of_a_real_regression_with_a_glitch_in_history_agrees_with_its_interval(glitch):
    rng = random.Random(9)
    hist = [_run(i, v) for i, v in enumerate(_history(rng, 15))]
    hist.insert(7, _run(40, [glitch] * 5))
    hist = [_run(i, h.cells[CELL].values) for i, h in enumerate(hist)]
    cur = _run(30, [1000 * 0.85 * rng.gauss(1, 0.01) for _ in range(5)])
    rep = detect(cur, hist)
    (v,) = [x for x in rep.verdicts if x.kind == "throughput"]
    assert v.status == REGRESSION
    lo, hi = v.ci_pct
    assert lo <= v.delta_pct <= hi and hi < 0 and lo > -30  # the interval says "slower", and sensibly
    rep.lines() if hasattr(rep, "lines") else None


def test_typical_flags_only_glitches():
    assert typical([1000, 1010, 990, 1e300, 1e-300, math.inf, -1, 0]) == [True] * 3 + [False] * 5
    assert typical([1000, 1500, 700]) == [True] * 3  # noise, however large, is no glitch
