"""TF and PyTorch BERT name a too-short step window with one helper (_lines.window_problems):
the same wording, counted in steps, each with its own label and skip."""

from __future__ import annotations

from dlperf_tasks.frameworks._lines import step_window, window_problems
from dlperf_tasks.core.model import Sample, TrialStatus, Window
from tests.unit import logwriters as W
from tests.unit.test_parse_fidelity import run, trial


def test_both_timestamp_parsers_use_the_one_reason():
    tf = run("tensorflow_bert", W.tf(list(range(1, 61)), 0.1), trial("tensorflow_bert", 32))
    pt = run("pytorch_bert", W.dle(list(range(1, 61)), 1.0), trial("pytorch_bert", 96))
    for r in (tf, pt):
        assert r.status == TrialStatus.INVALID_LOG
    assert "only 60 of 120 iterations (last 'Train Step' seen 60, the window needs step 120; counted in steps)" \
        in tf.reason
    assert "only 55 of 120 iterations after the first 5 steps (last step seen 60, the window needs step 125; " \
           "counted in steps)" in pt.reason


def test_flat_timestamps_and_a_good_window():
    flat = [Sample(i, 100.0, "s") for i in range(1, 131)]
    w = Window(20, 100)
    assert window_problems(flat, step_window(flat, 1, w.warmup, w.total), w) == ["timestamps do not increase between step 20 and step 120"]
    good = [Sample(i, float(i), "s") for i in range(1, 131)]
    assert window_problems(good, step_window(good, 1, w.warmup, w.total, 5), w) == []
