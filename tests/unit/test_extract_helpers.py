"""``--format dlperf``'s lines and step_window's bounds, against their plain definitions."""

from __future__ import annotations

import random

from dlperf_tasks.report.markdown import dlperf_text_lines


# ----------------------------------------------------------------- --format dlperf lines
def _trial(index, value, valid=True):
    return {"index": index, "value": value, "valid": valid, "log": f"1n1g/b_{index}.log", "status": "OK", "reason": ""}


def test_dlperf_lines_show_each_growing_dict_as_repr_does():
    values = [463.11, 1e-05, 12.0, 0.1 + 0.2, 5e+20, -0.0, 463.11]
    trials = [_trial(i + 1, v) for i, v in enumerate(values)]
    trials.insert(3, _trial(2, 99.5))  # the same index again: the dict keeps its place
    trials.insert(5, _trial(9, 1.0, valid=False))
    result = {"cells": [{"metric_kind": "throughput", "trials": trials}], "dlperf": {}}
    want, acc = [], {}
    for t in trials:
        if t["valid"]:
            acc[t["index"]] = t["value"]
            want.append(f"{t['log']} {acc}")
    lines = list(dlperf_text_lines(result))
    assert lines[:len(want)] == want
    assert lines[len(want):] == ["# invalid: 1n1g/b_9.log: OK: "]


# ----------------------------------------------------------------- step_window's C-speed search
def test_step_window_bounds_are_the_first_logged_steps_at_the_window_ends():
    from dlperf_tasks.core.model import Sample
    from dlperf_tasks.frameworks._lines import step_window

    rng = random.Random(7)
    for i in range(3000):
        n, base = rng.randint(0, 40), rng.randint(1, 100)
        its = sorted(rng.sample(range(base, base + 80), n)) if i % 3 else [rng.randint(0, 60) for _ in range(n)]
        samples = [Sample(it, float(j), "s") for j, it in enumerate(its)]
        warmup, skip, stride = rng.randint(0, 20), rng.randint(0, 5), rng.choice([None, 1, 2, 5])
        total = warmup + rng.randint(0, 30)
        got = step_window(samples, stride, warmup, total, skip)
        if not its:
            assert got == (None, total + skip)
            continue
        origin = its[0] - max(stride or 1, 1)
        ends = [next((k for k, it in enumerate(its) if it >= origin + skip + b), None) for b in (warmup, total)]
        want = (None, origin + skip + total) if None in ends else (samples[ends[0]], samples[ends[1]])
        assert got == want, (its, stride, warmup, total, skip)
