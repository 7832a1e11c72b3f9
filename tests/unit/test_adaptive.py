"""Adaptive trial count (dlperf_tasks/policy/adaptive.py): CI of the median, stopping rule, records,
and the >= 30 % saving on low-noise cells of the bench's realistic noise."""

from __future__ import annotations

import random
import statistics

import pytest

from dlperf_tasks.policy import adaptive as A
def test_order_interval_coverage_is_the_binomial_one():
    iv = A.order_interval([3.0, 1.0, 2.0])
    assert (iv.lo, iv.hi, iv.confidence) == (1.0, 3.0, 0.75)  # too few values: the range, 1 - 2/2^3
    iv = A.order_interval(list(range(10)), 0.95)
    assert (iv.lo, iv.hi) == (1, 8) and iv.confidence == pytest.approx(1 - 2 * 11 / 1024, abs=1e-6)
    assert A.order_interval([5.0]).lo == 5.0
    with pytest.raises(ValueError):
        A.order_interval([])


def test_bootstrap_interval_is_deterministic_and_brackets_the_median():
    vals = [100.0, 101.0, 99.0, 100.5, 100.2, 99.7]
    a, b = A.bootstrap_interval(vals), A.bootstrap_interval(vals)
    assert a == b and a.lo <= statistics.median(vals) <= a.hi and a.method == "bootstrap"


def test_low_noise_cell_stops_at_min_and_noisy_cell_runs_to_max():
    low, noisy = A.simulate({"low": [100.0, 100.3, 99.8, 100.1, 100.2],
                             "noisy": [100.0, 104.0, 97.0, 102.0, 99.0]}, A.AdaptivePolicy())
    assert (low.trials_used, low.stopped, low.saved) == (3, A.CONVERGED, 2)
    assert "0.50 % <= 1 %" in low.reason and "coverage 75.0 %" in low.reason
    assert (noisy.trials_used, noisy.stopped) == (5, A.MAX_TRIALS)
    assert "maximum of 5 trial(s)" in noisy.reason


def test_invalid_trials_do_not_count_towards_the_minimum():
    d = A.simulate({"c": [None, 100.0, 100.1, None, 100.0, 100.05, 100.0]}, A.AdaptivePolicy())[0]
    assert d.n_valid == 3 and d.trials_used == 5 and d.stopped == A.CONVERGED
    none = A.simulate({"c": [None] * 4}, A.AdaptivePolicy())[0]
    assert none.stopped == A.NO_VALID and none.trials_used == 4


def test_tracker_wants_and_summary_and_worst_case():
    pol = A.AdaptivePolicy(min_trials=2, rel_width=0.02)
    tr = A.Tracker({"a": 5, "b": 5}, pol)
    assert tr.wants("a", 1) and tr.wants("a", 2) and not tr.wants("a", 6)
    tr.record("a", 100.0)
    tr.record("a", 100.5)
    assert not tr.wants("a", 3)  # converged after 2
    for v in (100.0, 110.0, 95.0):
        tr.record("b", v)
    assert tr.wants("b", 4)
    s = tr.summary()
    assert s["trials_used"] == 5 and s["trials_max"] == 10 and s["saved"] == 5
    assert A.worst_case({"a": 5, "b": 7}, pol) == {"min_trials": 4, "max_trials": 12}
    assert A.worst_case({"a": 5}, A.AdaptivePolicy(max_trials=4)) == {"min_trials": 3, "max_trials": 4}
    md = A.render_markdown(s)
    assert md.startswith(A.REPORT_HEADING) and "| a | 2 | 5 | converged |" in md and "50.0 % saved" in md


def test_policy_from_value_validates():
    assert A.AdaptivePolicy.from_value(None) is None and A.AdaptivePolicy.from_value(False) is None
    assert A.AdaptivePolicy.from_value(True) == A.AdaptivePolicy()
    assert A.AdaptivePolicy.from_value({"rel_width": 0.02}).rel_width == 0.02
    with pytest.raises(ValueError, match="unknown key"):
        A.AdaptivePolicy.from_value({"relwidth": 0.02})
    with pytest.raises(ValueError, match="rel_width"):
        A.AdaptivePolicy(rel_width=2)
    with pytest.raises(ValueError, match="method"):
        A.AdaptivePolicy(method="magic")


def test_saving_on_low_noise_cells_and_medians_within_interval():
    """Realistic low noise (robust CV 0.3 %, heavy tails, 3 % slow outliers): >= 30 % of trials
    saved against 5 fixed trials, and every adaptive median within 1 % of the fixed-count median."""
    rng = random.Random(3)
    seqs = {}
    for i in range(300):
        vals = []
        for _ in range(5):
            v = 1000.0 * (1 + 0.003 * rng.gauss(0, 1))
            if rng.random() < 0.03:
                v *= 0.9
            vals.append(round(v, 2))
        seqs[f"c{i}"] = vals
    ds = A.simulate(seqs, A.AdaptivePolicy())
    used = sum(d.trials_used for d in ds)
    assert 1 - used / (5 * len(ds)) >= 0.30
    for d in ds:
        fixed = statistics.median(seqs[d.cell_id])
        assert abs(d.median - fixed) / fixed <= 0.01


def test_bench_adaptive_runs(tmp_path, capsys):
    """bench/bench_adaptive.py on a few repetitions (the real size is in bench/README.md)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "bench_adaptive.py"
    spec = importlib.util.spec_from_file_location("bench_adaptive_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--reps", "20", "--json", str(tmp_path / "out.json")]) == 0
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["simulated"]["low-noise"]["saved_trials"] >= 0.30
    assert doc["replay"]["low-noise"]["cells"] == 9
    assert "goal met" in capsys.readouterr().out


def test_suite_fields_opt_in_and_are_checked_at_load(tmp_path, capsys):
    from pathlib import Path

    import yaml

    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.engine.decisions import for_sweep
    from dlperf_tasks.core.errors import DlperfError

    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "dlperf_tasks/catalog/suites/smoke.yaml").read_text())
    data.update(id="smoke-adaptive", adaptive={"rel_width": 0.02}, node_health={"quarantine": True, "threshold": 0.2})
    p = tmp_path / "smoke-adaptive.yaml"
    p.write_text(yaml.safe_dump(data))
    suite = load_suite(str(p))
    dec = for_sweep(suite, [], [])
    assert dec.adaptive.rel_width == 0.02 and dec.health.quarantine
    assert for_sweep(suite, [], [], adaptive=False).adaptive is None  # the run's override wins
    # the DAG's rules: a CI width as a number; `--quarantine` (true/false) keeps the suite's health settings
    assert for_sweep(suite, [], [], adaptive=0.05).adaptive.rel_width == 0.05
    off = for_sweep(suite, [], [], node_health=False).health
    assert (off.quarantine, off.threshold) == (False, 0.2)
    assert for_sweep(suite, [], [], node_health=True).health.threshold == 0.2
    from dlperf_tasks.cli import main

    assert main(["plan", str(p)]) == 0
    assert "adaptive trials: 6 to 6 (worst case = the fixed count" in capsys.readouterr().out
    data["adaptive"] = {"rel_width": 3}
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(DlperfError, match="rel_width"):
        load_suite(str(p))
