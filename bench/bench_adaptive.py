"""Adaptive trial count (issue 17 item 2): trials and GPU-hours saved against the fixed count,
and whether the adaptive medians stay within their intervals of the fixed-count medians.

Two inputs, both run through the real stopping rule (``dlperf_tasks.policy.adaptive.simulate``):

1. **replay**: the 16 cells of the DLPerf seed reports (MXNet BERT, TF BERT, MXNet RN50;
   ``tests/unit/dlperf_seed_data.py``), each cell's recorded trial speeds in trial order;
2. **simulated**: stand-in trials with realistic noise: per seed cell, ``--reps`` fixed-count
   sweeps whose values are the seed median times (1 + sigma * t(4)) with sigma = that cell's
   robust CV (MAD) in the seeds, plus a slow outlier (-5 .. -15 %) with probability
   ``--outlier`` per trial (a noisy neighbour, a throttled GPU).

A cell is **low-noise** when its robust CV is at most ``--low-cv`` (0.5 %). GPU-hours weight
every trial by the cell's GPU count (same trial length within a cell). Per class it reports
the trials and GPU-hours saved, how often the fixed-count median lies inside the adaptive CI,
and the largest |adaptive median - fixed median| relative to the fixed median (goal: within
the policy's interval width ``--rel-width``).

    .venv/bin/python bench/bench_adaptive.py [--reps 300] [--max-trials 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, goal, machine, save_json, table  # noqa: E402

sys.path.insert(0, str(ROOT))
from dlperf_tasks.policy.adaptive import AdaptivePolicy, simulate  # noqa: E402
from dlperf_tasks.core.topology import Topology  # noqa: E402


def seed_cells() -> list[dict[str, Any]]:
    from tests.unit.dlperf_seed_data import SEEDS

    out = []
    for name, seed in SEEDS.items():
        for topo, trials in seed["TRIALS"].items():
            seq = [trials[k] for k in sorted(trials)]
            med = statistics.median(seq)
            mad = 1.4826 * statistics.median(abs(x - med) for x in seq)
            out.append({"cell": f"{seed['suite']}/bz{seed['batch_size_per_device']}/{topo}", "values": seq,
                        "median": med, "cv": mad / med, "gpus": Topology.parse(topo).world_size})
    return out


def sample(rng: random.Random, median: float, cv: float, n: int, outlier: float) -> list[float]:
    vals = []
    for _ in range(n):
        t = rng.gauss(0, 1) / (sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4) ** 0.5  # Student t, df 4
        v = median * (1 + cv * t)
        if rng.random() < outlier:
            v *= 1 - rng.uniform(0.05, 0.15)
        vals.append(round(v, 2))
    return vals


def evaluate(runs: Sequence[dict[str, Any]], policy: AdaptivePolicy, low_cv: float) -> dict[str, dict[str, Any]]:
    """``runs``: {cell, values (fixed-count sequence), cv, gpus}. Per class the savings and checks."""
    classes: dict[str, dict[str, Any]] = {}
    decisions = simulate({f"{i}": r["values"] for i, r in enumerate(runs)}, policy)
    for r, d in zip(runs, decisions):
        cls = "low-noise" if r["cv"] <= low_cv else "other"
        c = classes.setdefault(cls, {"cells": 0, "trials_max": 0, "trials_used": 0, "gpu_max": 0, "gpu_used": 0,
                                     "in_ci": 0, "judged": 0, "max_dev": 0.0, "converged": 0})
        fixed = statistics.median(r["values"])
        c["cells"] += 1
        c["trials_max"] += len(r["values"])
        c["trials_used"] += d.trials_used
        c["gpu_max"] += len(r["values"]) * r["gpus"]
        c["gpu_used"] += d.trials_used * r["gpus"]
        c["converged"] += d.stopped == "converged"
        if d.ci_lo is not None:
            c["judged"] += 1
            c["in_ci"] += d.ci_lo <= fixed <= d.ci_hi
        if d.median is not None:
            c["max_dev"] = max(c["max_dev"], abs(d.median - fixed) / fixed)
    for c in classes.values():
        c["saved_trials"] = 1 - c["trials_used"] / c["trials_max"]
        c["saved_gpu_hours"] = 1 - c["gpu_used"] / c["gpu_max"]
        c["in_ci_fraction"] = c["in_ci"] / c["judged"] if c["judged"] else None
    return classes


def rows_of(label: str, classes: dict[str, dict[str, Any]]) -> list[list[Any]]:
    return [[label, k, c["cells"], f"{c['trials_used']}/{c['trials_max']}", f"{100 * c['saved_trials']:.1f} %",
             f"{100 * c['saved_gpu_hours']:.1f} %", c["converged"],
             "-" if c["in_ci_fraction"] is None else f"{100 * c['in_ci_fraction']:.1f} %",
             f"{100 * c['max_dev']:.2f} %"] for k, c in sorted(classes.items())]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=300, help="simulated fixed-count sweeps per seed cell")
    ap.add_argument("--max-trials", type=int, default=0, help="fixed count of the simulation (0 = the seed's)")
    ap.add_argument("--rel-width", type=float, default=0.01)
    ap.add_argument("--min-trials", type=int, default=3)
    ap.add_argument("--method", default="order", choices=("order", "bootstrap"))
    ap.add_argument("--low-cv", type=float, default=0.005)
    ap.add_argument("--outlier", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    policy = AdaptivePolicy(min_trials=a.min_trials, rel_width=a.rel_width, method=a.method,
                            n_boot=500 if a.method == "bootstrap" else 2000)
    cells = seed_cells()
    replay = evaluate(cells, policy, a.low_cv)
    rng = random.Random(a.seed)
    sim_runs = [{"cell": c["cell"], "cv": c["cv"], "gpus": c["gpus"],
                 "values": sample(rng, c["median"], c["cv"], a.max_trials or len(c["values"]), a.outlier)}
                for c in cells for _ in range(a.reps)]
    sim = evaluate(sim_runs, policy, a.low_cv)
    head = ["input", "class", "cells", "trials used", "trials saved", "GPU-h saved", "converged",
            "fixed median in CI", "max |adaptive - fixed|"]
    print(f"adaptive trials: min {a.min_trials}, {a.method} CI of the median within {a.rel_width * 100:g} %, "
          f"max = the fixed count; low-noise = robust CV <= {a.low_cv * 100:g} %; {machine()}")
    print(table(head, rows_of("seed replay", replay) + rows_of(f"simulated x{a.reps}", sim)))
    low = sim.get("low-noise")
    if low:
        print(goal("simulated low-noise cells: trials saved", 100 * low["saved_trials"], 30.0,
                   lower_is_better=False, unit="%"))
        print(goal("simulated low-noise cells: max |adaptive - fixed median|", 100 * low["max_dev"],
                   100 * a.rel_width, unit="%"))
    rlow = replay.get("low-noise")
    if rlow:
        print(goal("seed replay low-noise cells: trials saved", 100 * rlow["saved_trials"], 30.0,
                   lower_is_better=False, unit="%"))
    save_json(a.json, {"policy": policy.to_dict(), "replay": replay, "simulated": sim, "reps": a.reps,
                       "machine": machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
