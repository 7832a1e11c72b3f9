"""Benchmark: a very large run (issue 6 item 4): every suite, every topology, batch size and
precision, 7 trials, on a 32-node inventory.

    .venv/bin/python bench/bench_load.py                  # 32 nodes, 7 trials, up to 32n8g (~1 min)
    .venv/bin/python bench/bench_load.py --nodes 8 --trials 3

Each step runs in a fresh process (so its peak RSS is its own):

plan        ``plan()`` of every built-in suite but smoke (the five DLPerf suites and the LLM
            pretraining suites) with topologies 1n1g .. <nodes>n8g (Megatron: its
            layout table; topologies cannot be overridden there), precisions fp32+amp, XLA
            both where supported, ``--trials`` trials; also ``Plan.summary()`` and the plan JSON.
simulate    ``scheduler.simulate`` of all those trials on the generated <nodes>-node inventory,
            per policy, trial duration = its window (warm-up + measured iterations) in seconds.
dag_parse   ``dag_factory.build_all()`` (Airflow already imported), the DAGs with the inventory.
expand      the ``plan`` task of each DAG, called through the DAG factory (its python callable,
            dry run, 32-node inventory): how many mapped ``trial`` task instances one DAG run
            expands to, and the JSON size of the XComs (trial list = the mapped task's input,
            plan). Compared with Airflow's ``[core] max_map_length`` (read from the installed
            Airflow's configuration, with dlperf's airflow.cfg.template rendered): a DAG run
            whose trial list is longer fails in its plan task (the API server refuses the XCom).

Exit status: 0 unless something really failed (limits exceeded are reported, not errors).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ROOT, BenchError, Timer, goal, machine, run_worker, save_json, table,  # noqa: E402
                     worker_main)


def suite_ids() -> list[str]:
    """Every built-in suite but the smoke demo."""
    from dlperf_tasks.catalog.loader import list_suites

    return sorted(s.id for s in list_suites() if s.id != "smoke")


#: goals for the 32-node plan: planning + simulation each under 10 s, expanding each DAG
#: under 10 s, and each DAG run within Airflow's max_map_length
GOAL_PLAN_S = 10.0
GOAL_SIM_S = 10.0
GOAL_EXPAND_S = 10.0


def topologies(nodes: int) -> list[str]:
    """1n1g, 1n2g, 1n4g, 1n8g, 2n8g, 4n8g, ... up to <nodes>n8g (powers of two, plus nodes itself)."""
    out = ["1n1g", "1n2g", "1n4g", "1n8g"]
    n = 2
    while n < nodes:
        out.append(f"{n}n8g")
        n *= 2
    if nodes > 1:
        out.append(f"{nodes}n8g")
    return out


def write_inventory(path: Path, nodes: int) -> Path:
    """A cluster YAML with ``nodes`` nodes of 8 GPUs (nobody connects to them here)."""
    import yaml

    inv = {"name": f"bench{nodes}", "defaults": {"user": "root", "port": 22, "gpus": 8, "interface": "eth0",
                                                  "workdir": "/var/tmp/dlperf", "data_dir": "/data"},
           "nodes": [{"name": f"node{i:02d}", "host": f"10.0.{i // 250}.{i % 250 + 1}"} for i in range(1, nodes + 1)]}
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def overrides_for(suite, p: dict[str, Any]) -> dict[str, Any]:
    ov: dict[str, Any] = {"trials": p["trials"], "precisions": ["fp32", "amp"]}
    if not getattr(suite, "layouts", None):
        ov["topologies"] = p["topologies"]
    if any(suite.xla):
        ov["xla"] = "both"
    # only the precisions the suite has batch sizes for
    ov["precisions"] = [x for x in ov["precisions"] if suite.batch_sizes_for(x) or getattr(suite, "layouts", None)]
    if getattr(suite, "layouts", None):
        ov["precisions"] = list(suite.precisions)
    return ov


# ------------------------------------------------------------------ worker steps (fresh process each)
def step_plan(p: dict[str, Any]) -> dict[str, Any]:
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.plan import plan

    out: dict[str, Any] = {"suites": {}}
    with Timer() as t:
        plans = []
        for sid in suite_ids():
            s = load_suite(sid)
            pl = plan(s, overrides_for(s, p))
            plans.append(pl)
            out["suites"][sid] = {"cells": len(pl.cells), "trials": len(pl.trials)}
    out["plan_s"] = t.s
    with Timer() as t:
        for pl in plans:
            pl.summary()
    out["summary_s"] = t.s
    with Timer() as t:
        out["plan_json_bytes"] = sum(len(json.dumps(pl.to_dict())) for pl in plans)
    out["to_dict_s"] = t.s
    out["cells"] = sum(v["cells"] for v in out["suites"].values())
    out["trials"] = sum(v["trials"] for v in out["suites"].values())
    return out


def step_simulate(p: dict[str, Any]) -> dict[str, Any]:
    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.plan import plan
    from dlperf_tasks.remote.inventory import Cluster
    from dlperf_tasks.policy.scheduler import Job, simulate

    cluster = Cluster.from_yaml(p["inventory"])
    nodes = {n.name: n.gpus for n in cluster.nodes}
    jobs = []
    for sid in suite_ids():
        s = load_suite(sid)
        jobs += [Job.from_trial(t.trial) for t in plan(s, overrides_for(s, p)).trials]
    dur = {j.key: j.estimate_s for j in jobs}
    out: dict[str, Any] = {"jobs": len(jobs), "nodes": len(nodes)}
    for policy in p["policies"]:
        with Timer() as t:
            sim = simulate(jobs, nodes, dur, policy)
        out[policy] = {"seconds": t.s, "makespan": sim.makespan, "bound": sim.lower_bound,
                       "unschedulable": len(sim.unschedulable)}
    return out


def _settings(p: dict[str, Any]):
    from dlperf_tasks.airflow.settings import DlperfSettings

    return DlperfSettings(cluster=p["inventory"], store_url=f"file://{p['tmp']}/store", work_dir=f"{p['tmp']}/work")


def step_dag_parse(p: dict[str, Any]) -> dict[str, Any]:
    import airflow.sdk  # noqa: F401  (the DAG processor has Airflow loaded already)

    from dlperf_tasks.airflow.dag_factory import build_all

    with Timer() as t:
        dags = build_all(_settings(p))
    return {"seconds": t.s, "dags": len(dags), "tasks": sum(len(d.tasks) for d in dags.values())}


class _TI:
    """Stands in for the TaskInstance in the plan task's context: records xcom_push."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def step_expand(p: dict[str, Any]) -> dict[str, Any]:
    from airflow.configuration import conf as af_conf

    from dlperf_tasks.airflow.dag_factory import DAG_PREFIX, build_all, suites_by_dag

    from dlperf_tasks.airflow.params import schemas

    max_map = af_conf.getint("core", "max_map_length", fallback=1024)
    form_max_trials = int(schemas([])["trials"]["maximum"])
    dags = build_all(_settings(p))
    groups = suites_by_dag()
    out: dict[str, Any] = {"max_map_length": max_map, "form_max_trials": form_max_trials, "dags": {}}
    for dag_id, dag in sorted(dags.items()):
        if dag_id == "dlperf_smoke":
            continue
        suites = groups[dag_id[len(DAG_PREFIX):]]
        conf: dict[str, Any] = {"trials": p["trials"], "dry_run": True, "precisions": ["fp32", "amp"]}
        if suites and not any(getattr(s, "layouts", None) for s in suites):
            conf["topologies"] = p["topologies"]
        if any(any(s.xla) for s in suites):
            conf["xla"] = "both"
        if any(getattr(s, "layouts", None) for s in suites):
            conf["precisions"] = sorted({x for s in suites for x in s.precisions})
        fn = dag.get_task("plan").python_callable
        ti = _TI()
        ctx = {"dag_run": SimpleNamespace(conf=conf, run_id=f"bench__{dag_id}"), "ti": ti}
        sink = io.StringIO()
        with Timer() as t, contextlib.redirect_stdout(sink):
            items = fn(**ctx)
        out["dags"][dag_id] = {
            "seconds": t.s, "mapped": len(items), "trial_xcom_bytes": len(json.dumps(items)),
            "plan_xcom_bytes": len(json.dumps(ti.pushed.get("plan"))), "summary_chars": len(sink.getvalue()),
            "over_max_map_length": len(items) > max_map, "suites": [s.id for s in suites],
            # the same run with the most trials per cell the run form accepts
            "mapped_at_form_max_trials": len(items) // p["trials"] * form_max_trials,
        }
    return out


STEPS = {"plan": step_plan, "simulate": step_simulate, "dag_parse": step_dag_parse, "expand": step_expand}


def work(p: dict[str, Any]) -> dict[str, Any]:
    return STEPS[p["step"]](p)


def airflow_env(tmp: Path) -> dict[str, str]:
    """Environment with an isolated AIRFLOW_HOME whose airflow.cfg is dlperf's template, rendered
    by scripts/airflow-env.sh without DB (so max_map_length is what a deployment would get)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k not in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")}
    env.update({"AIRFLOW_HOME": str(tmp / "airflow"), "DLPERF_SKIP_DB": "1", "PYTHON": sys.executable})
    script = ROOT / "scripts" / "airflow-env.sh"
    if script.exists():
        r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
        if r.returncode != 0:
            raise BenchError(f"scripts/airflow-env.sh failed:\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
        env["AIRFLOW_CONFIG"] = str(tmp / "airflow" / "airflow.cfg")
    else:
        (tmp / "airflow").mkdir(parents=True, exist_ok=True)
    env.pop("DLPERF_SKIP_DB")
    return env


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--nodes", type=int, default=32, help="nodes in the generated inventory (default 32)")
    ap.add_argument("--trials", type=int, default=7, help="trials per cell (default 7)")
    ap.add_argument("--policies", default="packed,sequential,packed_exclusive_multinode",
                    help="scheduling policies to simulate")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"steps to run (default {','.join(STEPS)})")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    if a.nodes < 1 or a.trials < 1:
        ap.error("--nodes and --trials must be >= 1")
    steps = [s.strip() for s in a.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad:
        ap.error(f"unknown step {', '.join(bad)}; known: {', '.join(STEPS)}")
    me = Path(__file__).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="dlperf-bench-load-"))
    results: dict[str, Any] = {"machine": machine(), "nodes": a.nodes, "trials": a.trials}
    try:
        inv = write_inventory(tmp / "cluster.yaml", a.nodes)
        env = airflow_env(tmp)
        payload = {"inventory": str(inv), "tmp": str(tmp), "trials": a.trials, "topologies": topologies(a.nodes),
                   "policies": [x.strip() for x in a.policies.split(",") if x.strip()]}
        print(f"{len(suite_ids())} suites, topologies {','.join(payload['topologies'])} (Megatron: its layouts), "
              f"fp32+amp, XLA both (TF), {a.trials} trials, {a.nodes}-node inventory", flush=True)
        rows = []
        for step in steps:
            r = run_worker(me, {**payload, "step": step}, env=env)
            results[step] = r
            if step == "plan":
                rows.append(["plan (5 suites)", f"{r['cells']} cells, {r['trials']} trials", f"{r['plan_s']:.2f}",
                             f"{r['peak_rss_mib']:.0f}"])
                rows.append(["  Plan.summary()", "", f"{r['summary_s']:.2f}", ""])
                rows.append(["  Plan.to_dict() JSON", f"{r['plan_json_bytes'] / 1e6:.2f} MB", f"{r['to_dict_s']:.2f}", ""])
            elif step == "simulate":
                for pol in payload["policies"]:
                    s = r[pol]
                    rows.append([f"simulate {pol}", f"{r['jobs']} trials, makespan {s['makespan'] / 3600:.1f} h "
                                 f"({s['makespan'] / s['bound']:.2f}x bound)", f"{s['seconds']:.2f}",
                                 f"{r['peak_rss_mib']:.0f}"])
            elif step == "dag_parse":
                rows.append(["build_all() (DAG parse)", f"{r['dags']} DAGs, {r['tasks']} tasks", f"{r['seconds']:.2f}",
                             f"{r['peak_rss_mib']:.0f}"])
            elif step == "expand":
                for dag_id, d in r["dags"].items():
                    flag = "  > max_map_length!" if d["over_max_map_length"] else ""
                    rows.append([f"plan task {dag_id}", f"{d['mapped']} mapped trials{flag}; XCom "
                                 f"{d['trial_xcom_bytes'] / 1e6:.2f} MB (+ plan {d['plan_xcom_bytes'] / 1e6:.2f} MB)",
                                 f"{d['seconds']:.2f}", f"{r['peak_rss_mib']:.0f}"])
        print()
        print(f"large-run load ({machine()}); peak RSS per step (fresh process, imports included)")
        print(table(["step", "size", "seconds", "peak RSS MiB"], rows))
        print()
        if "plan" in results:
            print(goal("plan of 5 suites", results["plan"]["plan_s"] + results["plan"]["summary_s"], GOAL_PLAN_S, unit="s"))
        if "simulate" in results:
            worst = max(results["simulate"][pol]["seconds"] for pol in payload["policies"])
            print(goal("scheduler simulation (slowest policy)", worst, GOAL_SIM_S, unit="s"))
        if "expand" in results:
            e = results["expand"]
            worst = max(d["seconds"] for d in e["dags"].values())
            print(goal("plan task (slowest DAG)", worst, GOAL_EXPAND_S, unit="s"))
            longest = max(d["mapped"] for d in e["dags"].values())
            print(goal(f"mapped trials per DAG run vs [core] max_map_length = {e['max_map_length']}", longest,
                       e["max_map_length"]))
            worst_form = max(e["dags"].items(), key=lambda kv: kv[1]["mapped_at_form_max_trials"])
            results["expand"]["worst_form_run"] = [worst_form[0], worst_form[1]["mapped_at_form_max_trials"]]
            print(goal(f"same run with trials = {e['form_max_trials']} (the form's maximum), {worst_form[0]}",
                       worst_form[1]["mapped_at_form_max_trials"], e["max_map_length"]))
            over = [k for k, d in e["dags"].items() if d["over_max_map_length"]]
            if over:
                print(f"  LIMIT: {', '.join(over)} would fail in their plan task: Airflow refuses to map more than "
                      f"max_map_length = {e['max_map_length']} items (set [core] max_map_length, or split the run)")
        save_json(a.json, results)
    except BenchError as exc:
        print(f"bench_load: error: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], work):
        sys.exit(main())
