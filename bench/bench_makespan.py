"""Benchmark: sweep makespan of the scheduling policies on a 4-node cluster (issue 7).

    .venv/bin/python bench/bench_makespan.py                  # simulation + a real sweep (~3-5 min)
    .venv/bin/python bench/bench_makespan.py --sim-only       # simulation only (< 1 s)
    .venv/bin/python bench/bench_makespan.py --trial-s 3 --trials 5 --cluster /tmp/dlperf-testcluster/cluster.yaml

The sweep: 6 topologies (1n1g, 1n2g, 1n4g, 1n8g, 2n8g, 4n8g) x 5 trials = 30 trials on 4
nodes of 8 GPUs. The lower bound no schedule can beat is max(total node-seconds / nodes,
longest trial) (``dlperf_tasks.policy.scheduler.lower_bound``; trials have no dependencies, so
the longest chain is the longest trial).

1. Simulation: ``dlperf_tasks.policy.scheduler.simulate`` with a fixed duration per trial (and,
   as a check of robustness, seeded random durations of 0.5-1.5x).
2. Real: ``dlperf sweep --policy P`` (the real CLI: SSH to real sshd nodes, host runtime,
   stand-in trainer replaying TensorFlow BERT logs, one process per node) with short trials
   of about ``--trial-s`` seconds. Makespan = first trial start to last trial end (from the
   trial files); its bound is computed from the *measured* trial durations. Without
   ``--cluster`` it starts 4 throwaway sshd nodes on 127.0.x.y (tests/fixtures/sshd_nodes.py).

Goals (issue 7): packed <= 1.15 x lower bound, and packed >= 2x faster than sequential.
Exit status: 0 unless something really failed (a missed goal is only printed).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, BenchError, Timer, goal, machine, save_json, table  # noqa: E402

from dlperf_tasks.policy.scheduler import POLICIES, Job, lower_bound, simulate  # noqa: E402

TOPOLOGIES = ("1n1g", "1n2g", "1n4g", "1n8g", "2n8g", "4n8g")
GOAL_BOUND_RATIO = 1.15
GOAL_SPEEDUP = 2.0
STANDIN = ROOT / "docker" / "standin" / "rootfs"


def sweep_jobs(trials: int, estimate_s: float = 1.0) -> list[Job]:
    """The sweep's jobs in plan order (topology by world size, trials 1..N)."""
    jobs = []
    for t in TOPOLOGIES:
        nodes, gpus = int(t.split("n")[0]), int(t.split("n")[1].rstrip("g"))
        for i in range(1, trials + 1):
            jobs.append(Job(f"{t}/t{i}", nodes, gpus, estimate_s))
    return jobs


def nodes_of(n: int, gpus: int = 8) -> dict[str, int]:
    return {f"node{i}": gpus for i in range(1, n + 1)}


def simulate_all(trials: int, n_nodes: int, trial_s: float, seed: int | None) -> dict[str, Any]:
    """Makespan of every policy for fixed (seed None) or random 0.5-1.5x durations."""
    jobs = sweep_jobs(trials, trial_s)
    rng = random.Random(seed)
    durations = {j.key: trial_s if seed is None else trial_s * rng.uniform(0.5, 1.5) for j in jobs}
    nodes = nodes_of(n_nodes)
    out = {"bound": lower_bound(jobs, durations, n_nodes)}
    for policy in POLICIES:
        sim = simulate(jobs, nodes, durations, policy)
        if sim.unschedulable:
            raise BenchError(f"simulation ({policy}): {len(sim.unschedulable)} trials could not be scheduled")
        out[policy] = sim.makespan
    return out


# ------------------------------------------------------------------ real sweep
def host_suite(dest: Path, trial_s: float, iters: int) -> Path:
    """A TensorFlow BERT suite that runs the stand-in trainer on the host (no container): one
    process per node (TF starts one worker per node), ~``trial_s`` seconds per trial."""
    import yaml

    data = yaml.safe_load((ROOT / "dlperf_tasks/catalog/suites/tensorflow-bert.yaml").read_text())
    data["id"] = "bench-makespan"
    data["container"] = None
    data["launcher"] = dict(data.get("launcher") or {})
    data["launcher"]["workdir"] = str(STANDIN / "workspace/models/official/nlp/bert")
    data["launcher"]["python"] = sys.executable
    data["launcher"]["node_files_dir"] = str(ROOT / "dlperf_tasks/catalog/data")  # host runtime: the BERT config
    speed_per_gpu = 100.0
    # the stand-in sleeps (global batch / speed) x time_scale per step; global batch = bz x world,
    # speed = per_gpu x world -> a step takes bz / per_gpu synthetic seconds whatever the topology
    bz = 32
    step_s = bz / speed_per_gpu
    data["env"] = {"PYTHONPATH": str(STANDIN / "usr/lib/python3/dist-packages"),
                   "DLPERF_STANDIN_SPEED_PER_GPU": str(speed_per_gpu),
                   "DLPERF_STANDIN_TIME_SCALE": f"{trial_s / (iters * step_s):.6f}"}
    data["env_multi_node"] = {}
    data["window"] = {"warmup": max(1, iters // 5), "measure": iters - max(1, iters // 5)}
    data["topologies"] = list(TOPOLOGIES)
    data["batch_sizes"] = {"fp32": [bz]}
    data["precisions"] = ["fp32"]
    data["xla"] = [False]
    data.pop("exclude", None)
    data["timeout_s"] = max(60, int(trial_s * 20))
    data["hang_timeout_s"] = max(30, int(trial_s * 10))
    p = dest / "bench-makespan.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def run_real(policy: str, suite: Path, cluster: Path, out: Path, trials: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "dlperf_tasks", "sweep", "--suite", str(suite), "--cluster", str(cluster),
           "--out", str(out), "--policy", policy, "--trials", str(trials), "--no-env-capture", "--retries", "0",
           "--wait-for-nodes", "60"]
    with Timer() as t:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    if proc.returncode != 0:
        raise BenchError(f"dlperf sweep --policy {policy} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    spans = []
    ok = 0
    for f in sorted((out / "trials").glob("*.json")):
        doc = json.loads(f.read_text())
        tr = doc["trial"]
        s, e = _ts(tr.get("started_at")), _ts(tr.get("finished_at"))
        if s is None or e is None:
            raise BenchError(f"{f}: trial file has no started_at/finished_at")
        ok += tr.get("status") == "OK"
        nodes = int(doc["cell"]["topology"].split("n")[0]) if isinstance(doc["cell"]["topology"], str) \
            else int(doc["cell"]["topology"]["nodes"])
        spans.append((tr.get("trial_id") or f.stem, nodes, s, e))
    if not spans:
        raise BenchError(f"dlperf sweep --policy {policy} wrote no trial file under {out}/trials")
    jobs = [Job(k, n) for k, n, _, _ in spans]
    durs = {k: e - s for k, _, s, e in spans}
    makespan = max(e for *_, e in spans) - min(s for *_, s, _ in spans)
    return {"wall_s": t.s, "makespan_s": makespan, "bound_s": lower_bound(jobs, durs, 4), "trials": len(spans),
            "ok": ok, "mean_trial_s": sum(durs.values()) / len(durs)}


def _ts(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    return datetime.fromisoformat(str(v)).timestamp()


def start_nodes(tmp: Path):
    """4 throwaway real sshd nodes (8 'GPUs' each) -> (nodes, cluster YAML)."""
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.sshd_nodes import make_nodes

    return make_nodes(tmp, 4, base_octet=140, gpus=8)


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--trials", type=int, default=5, help="trials per topology (default 5)")
    ap.add_argument("--trial-s", type=float, default=3.0, help="duration of one stand-in trial in seconds (default 3)")
    ap.add_argument("--iters", type=int, default=30, help="iterations per real stand-in trial (default 30)")
    ap.add_argument("--sim-only", action="store_true", help="only the simulation (no real sweep)")
    ap.add_argument("--policies", default="packed,sequential",
                    help="policies of the real sweep (default packed,sequential)")
    ap.add_argument("--cluster", metavar="YAML", help="cluster inventory for the real sweep (e.g. the testcluster's); "
                    "default: 4 throwaway local sshd nodes")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    if a.trials < 1 or a.trial_s <= 0 or a.iters < 5:
        ap.error("--trials >= 1, --trial-s > 0 and --iters >= 5 please")
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        ap.error(f"unknown policy {', '.join(bad)}; choose from {', '.join(POLICIES)}")
    results: dict[str, Any] = {"machine": machine(), "trials": a.trials, "trial_s": a.trial_s}
    try:
        n_jobs = len(TOPOLOGIES) * a.trials
        print(f"sweep: {', '.join(TOPOLOGIES)} x {a.trials} trials = {n_jobs} trials on 4 nodes x 8 GPUs")
        rows = []
        for label, seed in (("fixed", None), ("random 0.5-1.5x", 7)):
            s = simulate_all(a.trials, 4, a.trial_s, seed)
            results[f"sim_{'fixed' if seed is None else 'random'}"] = s
            b = s["bound"]
            rows.append([f"simulated, {label}", f"{b:.1f}"] +
                        [f"{s[p]:.1f} ({s[p] / b:.2f}x)" for p in POLICIES] + [f"{s['sequential'] / s['packed']:.2f}x"])
        real = {}
        if not a.sim_only:
            tmp = Path(tempfile.mkdtemp(prefix="dlperf-bench-makespan-"))
            nodes = []
            try:
                if a.cluster:
                    cluster = Path(a.cluster)
                else:
                    nodes, cluster = start_nodes(tmp)
                suite = host_suite(tmp, a.trial_s, a.iters)
                for p in policies:
                    print(f"real sweep --policy {p} ...", flush=True)
                    timeout = 600 + n_jobs * a.trial_s * 10
                    real[p] = run_real(p, suite, cluster, tmp / f"out-{p}", a.trials, timeout)
            finally:
                if nodes:
                    from tests.fixtures.sshd_nodes import stop_nodes

                    stop_nodes(nodes)
                shutil.rmtree(tmp, ignore_errors=True)
            results["real"] = real
            for p, r in real.items():
                if r["ok"] != r["trials"]:
                    print(f"warning: real sweep --policy {p}: only {r['ok']}/{r['trials']} trials valid")
            # each policy against the bound of ITS OWN measured trial durations
            bounds = "/".join(f"{real[p]['bound_s']:.1f}" for p in POLICIES if p in real)
            row = [f"real ({a.trial_s:g} s trials)", bounds]
            for p in POLICIES:
                row.append(f"{real[p]['makespan_s']:.1f} ({real[p]['makespan_s'] / real[p]['bound_s']:.2f}x)"
                           if p in real else "-")
            row.append(f"{real['sequential']['makespan_s'] / real['packed']['makespan_s']:.2f}x"
                       if "sequential" in real and "packed" in real else "-")
            rows.append(row)
        print()
        print(f"makespan in seconds (ratio to the lower bound; real rows: to the bound of that run's own measured "
              f"trial durations, bound column lists them per policy run) -- {machine()}")
        print(table(["case", "bound"] + list(POLICIES) + ["seq/packed"], rows))
        print()
        s = results["sim_fixed"]
        print(goal("simulated packed / bound", s["packed"] / s["bound"], GOAL_BOUND_RATIO))
        print(goal("simulated sequential / packed", s["sequential"] / s["packed"], GOAL_SPEEDUP, lower_is_better=False))
        if "packed" in real:
            r = real["packed"]
            print(goal("real packed / bound (measured durations)", r["makespan_s"] / r["bound_s"], GOAL_BOUND_RATIO))
        for p, r in real.items():
            print(f"  real {p}: mean trial {r['mean_trial_s']:.2f} s ({a.trial_s:g} s of training + launch, log "
                  f"collection and gating), {r['ok']}/{r['trials']} valid, whole command {r['wall_s']:.1f} s")
        if "packed" in real and "sequential" in real:
            sp = real["sequential"]["makespan_s"] / real["packed"]["makespan_s"]
            print(goal("real sequential / packed", sp, GOAL_SPEEDUP, lower_is_better=False))
        save_json(a.json, results)
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"bench_makespan: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
