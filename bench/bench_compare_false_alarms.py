"""Simulation: does ``dlperf results compare`` call same-code runs faster/slower? (issue 26.2)

Pairs of runs of the *same* code are drawn under varying host load and compared through the
code ``compare`` runs per cell (:func:`dlperf_tasks.history.compare.history_noise`'s model:
``noise_from_history`` of the cell's earlier runs on the machine, else ``noise_from_pair``,
then ``median_diff_interval``). Any ``faster``/``slower`` verdict is a false alarm.

Load model, per run: the host is busy with probability 1/2; a busy run loses a uniform
0-``busy_drop`` of its speed (every trial at once) and its trials spread ``busy_within`` more;
every run also moves by a log-normal ``between`` and every trial by a log-normal ``within``.
Profiles:

- ``make-run-here``: what ``make run`` shows on this shared 2-core VM (issue 26: 1n1g trials
  127.9 / 15.68 / 59.9, CV 0.83): within 0.7 (log sd), busy drop up to 60 %, between 0.15;
- ``busy-host``: the issue's "+18.5 % faster after 3 history runs on a busy host": within 0.05,
  busy drop up to 30 %, between 0.03;
- ``gpu-node``: a quiet GPU node: within 0.01, between 0.005, never busy.

Each profile: 3 trials a run, history of 3 and of 10 earlier runs, ``--sets`` sets of 30 pairs.
Goal: at most 1 false alarm in 30 pairs (rate <= 1/30), averaged over the sets.

Power: a 5 % change at 1 % trial noise with 5 trials a run (history of 3, 5 and 10 runs of 5
trials): the share of pairs called ``slower``. Goal: >= 95 % with 10 history runs.

    .venv/bin/python bench/bench_compare_false_alarms.py [--sets 100] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dlperf_tasks.history.interval import median_diff_interval, noise_from_history, noise_from_pair  # noqa: E402

PAIRS = 30
PROFILES = {
    "make-run-here": dict(within=0.7, between=0.15, busy_p=0.5, busy_drop=0.6, busy_within=0.3),
    "busy-host": dict(within=0.05, between=0.03, busy_p=0.5, busy_drop=0.3, busy_within=0.05),
    "gpu-node": dict(within=0.01, between=0.005, busy_p=0.0, busy_drop=0.0, busy_within=0.0),
}


def draw_run(rng: random.Random, trials: int, base: float, within: float, between: float, busy_p: float,
             busy_drop: float, busy_within: float) -> list[float]:
    busy = rng.random() < busy_p
    level = base * math.exp(rng.gauss(0, between)) * (1.0 - rng.uniform(0, busy_drop) if busy else 1.0)
    sd = within + (busy_within if busy else 0.0)
    return [level * math.exp(rng.gauss(0, sd)) for _ in range(trials)]


def verdict(history: list[list[float]], a: list[float], b: list[float]) -> str:
    noise = noise_from_history(history) or noise_from_pair(a, b)
    iv = median_diff_interval(a, b, noise)
    return "n/a" if iv is None else iv.verdict


def false_alarms(profile: dict, history_runs: int, trials: int, sets: int, rng: random.Random) -> list[int]:
    per_set = []
    for _ in range(sets):
        n = 0
        for _ in range(PAIRS):
            runs = [draw_run(rng, trials, 100.0, **profile) for _ in range(history_runs + 2)]
            n += verdict(runs[:history_runs], runs[-2], runs[-1]) in ("faster", "slower")
        per_set.append(n)
    return per_set


def power(change: float, history_runs: int, trials: int, pairs: int, rng: random.Random) -> float:
    quiet = dict(within=0.01, between=0.0, busy_p=0.0, busy_drop=0.0, busy_within=0.0)
    caught = 0
    for _ in range(pairs):
        hist = [draw_run(rng, trials, 100.0, **quiet) for _ in range(history_runs)]
        a = draw_run(rng, trials, 100.0, **quiet)
        b = draw_run(rng, trials, 100.0 * (1.0 + change), **quiet)
        caught += verdict(hist, a, b) == ("faster" if change > 0 else "slower")
    return caught / pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=100, help="sets of 30 same-code pairs per case (default 100)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ok = True
    print(f"false alarms per {PAIRS} same-code pairs (3 trials a run), mean over {args.sets} sets [max]:")
    for name, prof in PROFILES.items():
        cols = []
        for h in (0, 3, 10):
            fa = false_alarms(prof, h, 3, args.sets, rng)
            mean = sum(fa) / len(fa)
            ok &= mean <= 1.0
            cols.append(f"history {h:2d}: {mean:.2f} [{max(fa)}]")
        print(f"  {name:14} " + "; ".join(cols))
    caught = {h: power(-0.05, h, 5, 30 * args.sets, rng) for h in (3, 5, 10)}
    ok &= caught[10] >= 0.95
    print("5 % slowdown at 1 % trial noise, 5 trials a run: caught in "
          + ", ".join(f"{100 * p:.1f} % of pairs with {h} history runs" for h, p in caught.items()))
    print("goal (<= 1 false alarm in 30 pairs; >= 95 % caught with 10 history runs): " + ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
