"""Steady-state trend test, warm-up suggestion and loss band (dlperf_tasks/measure/steady.py)."""

from __future__ import annotations

import random

from dlperf_tasks.measure import steady
from dlperf_tasks.core.model import Sample


def _noisy(n, level=100.0, sd=1.0, seed=1):
    rng = random.Random(seed)
    return [level + rng.gauss(0, sd) for _ in range(n)]


def test_mann_kendall_known_values():
    s, z, p = steady.mann_kendall([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert s == 45 and p < 1e-4 and z > 0
    s, _, p = steady.mann_kendall([5, 5, 5, 5, 5])
    assert s == 0 and p == 1.0


def test_flat_noisy_series_is_steady_and_ramp_is_not():
    assert steady.trend(_noisy(100))["steady"]
    ramp = [60 + 40 * min(1.0, i / 40) + g for i, g in enumerate(_noisy(100, 0.0))]
    r = steady.trend(ramp)
    assert not r["steady"] and r["rel_change"] > 0.1 and r["p"] < 0.01


def test_tiny_but_significant_drift_within_one_percent_is_steady():
    drift = [100 + 0.005 * i + g for i, g in enumerate(_noisy(100, 0.0, sd=0.01))]  # 0.5% over the window
    assert steady.trend(drift)["steady"]


def test_cell_steadiness_suggests_warmup():
    flat = _noisy(100, seed=2)
    ramp = [60 + 40 * min(1.0, i / 30) + g for i, g in enumerate(_noisy(100, 0.0, seed=3))]
    out = steady.cell_steadiness({"t1": flat, "t2": ramp}, warmup=20)
    assert not out["steady"] and out["unsteady"] == ["t2"]
    assert 20 + 10 <= out["suggested_warmup"] <= 20 + 50
    cut = out["suggested_warmup"] - 20
    assert steady.trend(ramp[cut:])["steady"]
    assert steady.cell_steadiness({"t1": flat}, warmup=20) == {
        "steady": True, "trials": {"t1": steady.trend(flat)}, "unsteady": [], "suggested_warmup": None}


def test_series_from_samples_throughput_and_timestamps():
    sps = [Sample(i, 100.0 + i, "samples/s", rank=0) for i in range(1, 31)] + [Sample(5, 1.0, "samples/s", rank=1)]
    assert steady.series_from_samples(sps, warmup=20) == [100.0 + i for i in range(21, 31)]
    ts = [Sample(i, 1000.0 + 0.5 * i, "s", rank=0, timestamp=1000.0 + 0.5 * i) for i in range(1, 31)]
    assert steady.series_from_samples(ts, warmup=20) == [0.5] * 9


def _losses(rows, cell_id, run=None, limit=steady.LOSS_HISTORY_RUNS) -> list[float]:
    return [v for _, v in steady.history_rows(rows, cell_id, run, limit)]


def test_loss_band_flags_out_of_band_final_loss():
    hist = [6.91, 6.93, 6.90, 6.95, 6.92]
    assert steady.loss_verdict([6.94], hist)["status"] == "ok"
    f = steady.loss_verdict([9.7], hist)
    assert f["label"] == "fast but wrong?" and f["band"][1] < 9.7
    assert steady.loss_verdict([9.7], hist[:2])["status"] == "no_history"  # too little history
    assert steady.loss_verdict([float("nan")], hist)["status"] == "no_loss"  # non-finite: the validity gate's job
    rows = [{"cells": {"c": {"final_loss": 6.9}}}, {"cells": {"c": {"final_losses": [6.8, "x", 7.0]}}}, {"cells": {}}]
    assert _losses(rows, "c") == [6.9, 6.9]  # one figure per run: the median of its trials
    rows += [{"run_id": "me", "cells": {"c": {"final_losses": [1.0]}}},
             {"run_id": "bad", "status": "failed", "cells": {"c": {"final_losses": [2.0]}}}]
    assert _losses(rows, "c", {"run_id": "me"}) == [6.9, 6.9]
    assert _losses(rows, "c", limit=1) == [1.0]


def test_loss_history_only_counts_runs_that_trained_as_long():
    w = {"warmup": 2, "measure": 6}
    rows = [{"window": w, "cells": {"c": {"final_losses": [6.9]}}},
            {"window": {"warmup": 5, "measure": 20}, "cells": {"c": {"final_losses": [5.1]}}},
            {"cells": {"c": {"final_losses": [4.0]}}}]  # published before runs said their window
    assert _losses(rows, "c", {"window": w}) == [6.9]
    assert _losses(rows, "c", {"window": {"warmup": 5, "measure": 20}}) == [5.1]
    assert _losses(rows, "c") == [6.9, 5.1, 4.0]  # the run at hand does not say: every row
    assert not steady.same_training({"warmup": 2, "measure": 7}, w) and steady.same_training(dict(w), w)


def test_loss_verdict_states_and_band_definition():
    hist = [7.0, 7.1, 6.9, 7.05]
    flagged = steady.loss_verdict([9.9, 9.8, 9.95], hist)
    assert flagged["status"] == flagged["label"] == "fast but wrong?" and flagged["final_loss"] == 9.9
    # band = median +- max(4 x 1.4826 x MAD, 5% of the median)
    med, mad = 7.025, 0.05
    half = max(4 * 1.4826 * mad, 0.05 * med)
    assert flagged["band"] == [round(med - half, 4), round(med + half, 4)] and "outside the band" in flagged["detail"]
    assert steady.loss_verdict([2.0], hist)["status"] == "fast but wrong?"  # far lower is suspect too
    ok = steady.loss_verdict([7.02, 6.98], hist)
    assert ok["status"] == "ok" and ok["label"] is None and "within" in ok["detail"]
    bare = steady.loss_verdict([9.9], hist[:2])
    assert bare["status"] == "no_history" and "no loss history" in bare["detail"] and bare["band"] is None
    assert steady.loss_verdict([], hist)["status"] == "no_loss"


def test_reloaded_timestamp_samples_are_recognised():
    """A trial record stores no units: a timestamp-rule framework's samples come back as 'samples/s'
    whose values are epochs; they must be read as time stamps, not as a rising speed."""
    from dlperf_tasks.telemetry.summary import measured_window

    ts = [Sample(i, 1795406400.0 + 0.5 * i, "samples/s", rank=0) for i in range(1, 31)]
    assert steady.series_from_samples(ts, warmup=20) == [0.5] * 9
    assert steady.trend(steady.series_from_samples(ts, warmup=0))["steady"]
    assert measured_window(ts, 20) == (1795406400.0 + 10.5, 1795406400.0 + 15.0)
    assert measured_window([Sample(i, 100.0, "samples/s") for i in range(30)], 20) is None


def test_history_rows_are_the_runs_before_this_one():
    """One rule for the outputs step and the regression check: a run re-aggregated after later
    runs were published is judged against the runs before it, not after."""
    w = {"warmup": 2, "measure": 6}
    rows = [{"run_id": f"r{d}", "started_at": f"2026-11-{d:02d}T00:00:00+00:00", "window": w,
             "cells": {"c": {"final_losses": [float(d)]}}} for d in (23, 20, 21, 22)]
    me = {"run_id": "r22", "started_at": "2026-11-22T00:00:00+00:00", "window": w}
    assert [(r["run_id"], v) for r, v in steady.history_rows(rows, "c", me)] == [("r20", 20.0), ("r21", 21.0)]
    assert [v for _, v in steady.history_rows(rows, "c", me, limit=1)] == [21.0]
    assert [v for _, v in steady.history_rows(rows, "c")] == [20.0, 21.0, 22.0, 23.0]  # no run: every row, oldest first
