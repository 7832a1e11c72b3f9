"""Benchmark: the largest planned run through the real Celery deployment (issue 15.5).

    flock /tmp/dlperf-heavy.lock .venv/bin/python bench/bench_load_celery.py            # 693 trials
    flock /tmp/dlperf-heavy.lock .venv/bin/python bench/bench_load_celery.py --trials 56

What runs: the deployment of the scale-out test (tests/fixtures/services.py: PostgreSQL +
Redis; tests/fixtures/celery_airflow.py: api-server, scheduler, dag-processor, triggerer and
``--workers`` Celery workers, each with its own HOME and dlperf work_dir), the file store as
the only shared state. One DAG run of the site suite ``load`` (written to a temporary
``$DLPERF_CATALOG_PATH``) is triggered through the REST API; it maps ``--trials`` trial task
instances (default 693 = what ``dlperf_tensorflow`` maps for its 32-node plan, the largest
planned run; bench/bench_load.py). Cells are 1n1g with 7 trials each, like the seeds.

Stand-in trials: the framework ``load_standin`` (bench/load_standin/) on the ``local``
runtime: each trial is one process on the worker's host that prints the window's step lines
over ``--trial-s`` seconds and sleeps in between, then goes through the normal gate, trial
record and staging. Not the simulated cluster: its leases are per node (4 nodes = 4 trials at
once, a 2-5 s random back-off while a task waits for a lease, inside the task), and 693
docker+SSH trials do not fit a 2-core VM in one sitting; the Airflow side (pool, scheduler,
Celery, task processes, staging) is the same code.

Measured, from the metadata DB (``task_instance`` start/end dates of the ``trial`` tasks):

capacity C      the trial pool's slots (``--slots``), or the workers' total concurrency if lower.
latency         a trial's end frees a slot; the slot is taken by the next trial to start. With
                starts s(1) <= ... and ends e(1) <= ... sorted, latency k = s(C+k) - e(k) for
                every end while trials were still waiting (median, p95, max). Goal: median < 2 s.
makespan        last trial end - first trial start.
packing bound   max(sum of the trial task durations / C, longest trial task): no schedule of
                these tasks on C slots can be shorter (the trials are independent: the
                critical path is one trial). Goal: makespan <= 1.2 x bound. ``runtime bound``
                (trials x --trial-s / C) shows what the task overhead itself costs.

The run is bounded by ``--timeout-s`` (the DAG run is given up, everything stopped). Exit
status: 0 unless the deployment or the DAG run failed (missed goals are reported, not errors).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, BenchError, goal, machine, save_json, table  # noqa: E402

STANDIN = Path(__file__).resolve().parent / "load_standin"
DAG = "dlperf_load"
TRIALS_PER_CELL = 7
GOAL_MEDIAN_LATENCY_S = 2.0
GOAL_MAKESPAN_RATIO = 1.2


def write_catalog(dir_: Path, n_trials: int, trial_s: float) -> int:
    """The ``load`` suite (1n1g cells of 7 trials; batch sizes number the cells); returns the trial count."""
    cells = max(1, math.ceil(n_trials / TRIALS_PER_CELL))
    per_cell = TRIALS_PER_CELL if n_trials >= TRIALS_PER_CELL else n_trials
    (dir_ / "frameworks").mkdir(parents=True, exist_ok=True)
    shutil.copy(STANDIN / "frameworks" / "load_standin.py", dir_ / "frameworks" / "load_standin.py")
    shutil.copy(STANDIN / "load_trainer.py", dir_ / "load_trainer.py")
    (dir_ / "load.yaml").write_text("\n".join([
        "id: load", "framework: load_standin", "dag: load", "model: standin",
        "description: Stand-in trials of a few seconds for the Celery load bench.",
        "container: null", "upstream: null",
        f"launcher: {{speed: 250.0, seconds: {trial_s}}}", "env: {}",
        "window: {warmup: 2, measure: 8}", f"trials: {per_cell}",
        f"batch_sizes: [{', '.join(str(b) for b in range(1, cells + 1))}]",
        "precisions: [fp32]", "xla: [false]", "topologies: [1n1g]",
        "timeout_s: 300", "hang_timeout_s: 120", ""]))
    return cells * per_cell


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def analyse(rows: list[dict[str, Any]], capacity: int, trial_s: float) -> dict[str, Any]:
    """The figures of the docstring from task_instance rows (task_id, start_date, end_date as epoch s)."""
    trials = [r for r in rows if r["task_id"] == "trial" and r["start_date"] is not None and r["end_date"] is not None]
    if not trials:
        raise BenchError("no trial task instance has start and end dates")
    starts = sorted(r["start_date"] for r in trials)
    ends = sorted(r["end_date"] for r in trials)
    durs = [r["end_date"] - r["start_date"] for r in trials]
    lat = [starts[capacity + k] - ends[k] for k in range(len(trials) - capacity)]
    # the part of each latency before the next trial was queued (scheduler) and after (Celery + task start)
    by_start = sorted(trials, key=lambda r: r["start_date"])
    sched = [by_start[capacity + k]["queued_dttm"] - ends[k] for k in range(len(lat))
             if by_start[capacity + k]["queued_dttm"] is not None]
    events = sorted([(s, 1) for s in starts] + [(e, -1) for e in ends])
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    makespan = ends[-1] - starts[0]
    bound = max(sum(durs) / capacity, max(durs))
    other = {r["task_id"]: round(r["end_date"] - r["start_date"], 2) for r in rows
             if r["task_id"] != "trial" and r["start_date"] is not None and r["end_date"] is not None}
    prep_end = next((r["end_date"] for r in rows if r["task_id"] == "prepare" and r["end_date"] is not None), None)
    return {
        "trials": len(trials), "capacity": capacity, "peak_concurrency": peak,
        "latency_n": len(lat),
        "latency_median_s": round(statistics.median(lat), 3) if lat else None,
        "latency_p95_s": round(_pct(lat, 0.95), 3) if lat else None,
        "latency_max_s": round(max(lat), 3) if lat else None,
        "latency_to_queued_median_s": round(statistics.median(sched), 3) if sched else None,
        "latency_to_queued_p95_s": round(_pct(sched, 0.95), 3) if sched else None,
        "latencies_s": [round(x, 3) for x in lat],
        "first_start_after_prepare_s": round(starts[0] - prep_end, 3) if prep_end is not None else None,
        "fill_s": round(starts[min(capacity, len(starts)) - 1] - starts[0], 3),
        "task_duration_median_s": round(statistics.median(durs), 3),
        "task_duration_max_s": round(max(durs), 3),
        "makespan_s": round(makespan, 2), "bound_s": round(bound, 2),
        "makespan_ratio": round(makespan / bound, 3),
        "runtime_bound_s": round(len(trials) * trial_s / capacity, 2),
        "other_tasks_s": other,
    }


def db_rows(pg, run_id: str) -> list[dict[str, Any]]:
    import psycopg2

    con = psycopg2.connect(host="127.0.0.1", port=pg.port, user="airflow", password=pg.password, dbname="airflow")
    try:
        with con.cursor() as cur:
            cur.execute("SELECT task_id, map_index, state, try_number, EXTRACT(EPOCH FROM start_date), "
                        "EXTRACT(EPOCH FROM end_date), EXTRACT(EPOCH FROM queued_dttm) FROM task_instance "
                        "WHERE dag_id = %s AND run_id = %s",
                        (DAG, run_id))
            out = cur.fetchall()
    finally:
        con.close()
    f = lambda x: float(x) if x is not None else None  # noqa: E731
    return [{"task_id": t, "map_index": m, "state": s, "try_number": n, "start_date": f(a), "end_date": f(b),
             "queued_dttm": f(q)} for t, m, s, n, a, b, q in out]


def _wait_dag(svc, deadline: float) -> None:
    while svc.request("GET", f"/dags/{DAG}")[0] != 200:
        if time.monotonic() > deadline:
            raise BenchError(f"{DAG} not parsed in time:\n{svc.log('dag-processor')}")
        time.sleep(3)


def _run(svc, deadline: float, load: list[float]) -> tuple[str, str]:
    """Unpause, trigger through the REST API, wait for the run's end; (run_id, state)."""
    _wait_dag(svc, deadline)
    code, body = svc.request("PATCH", f"/dags/{DAG}", {"is_paused": False})
    if code != 200:
        raise BenchError(f"unpause failed: {code} {body}")
    code, dr = svc.request("POST", f"/dags/{DAG}/dagRuns", {"logical_date": None, "conf": {}})
    if code != 200:
        raise BenchError(f"trigger failed: {code} {dr}")
    run_id = dr["dag_run_id"]
    while time.monotonic() < deadline:
        load.append(os.getloadavg()[0])
        code, body = svc.request("GET", f"/dags/{DAG}/dagRuns/{run_id}", timeout=60)
        if code == 200 and body["state"] in ("success", "failed"):
            return run_id, body["state"]
        time.sleep(5)
    return run_id, "timeout"


def _failure_logs(home: Path, rows: list[dict[str, Any]], lines: int = 12) -> dict[str, str]:
    """The last lines of each failed trial task's log (why the DAG run failed)."""
    out = {}
    for r in rows:
        if r["task_id"] == "trial" and r["state"] not in ("success", None):
            logs = sorted(home.glob(f"logs/dag_id={DAG}/run_id=*/task_id=trial/map_index={r['map_index']}/*.log"))
            text = logs[-1].read_text(errors="replace").splitlines()[-lines:] if logs else ["(no log)"]
            out[f"trial[{r['map_index']}] {r['state']}"] = "\n".join(text)
    return out


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fixtures import celery_airflow
    from tests.fixtures.services import start_services

    root = Path(tempfile.mkdtemp(prefix="dlperf-load-"))
    os.chmod(root, 0o755)
    n = write_catalog(root / "catalog", args.trials, args.trial_s)
    extra = {"DLPERF_CATALOG_PATH": str(root / "catalog"), "AIRFLOW__DLPERF__CLUSTER": "local",
             "AIRFLOW__DLPERF__STORE_URL": f"file://{root / 'store'}", "AIRFLOW__DLPERF__TRIAL_RETRIES": "0"}
    for kv in args.set:
        k, _, v = kv.partition("=")
        extra[k if k.startswith("AIRFLOW__") else f"AIRFLOW__{k.upper()}"] = v
    workers = {f"w{i + 1}": args.concurrency for i in range(args.workers)}
    capacity = min(args.slots, args.workers * args.concurrency)
    deadline = time.monotonic() + args.timeout_s
    load: list[float] = []
    pg, redis = start_services(root / "services")
    svc = None
    t0 = time.monotonic()
    try:
        svc = celery_airflow.start(root / "af", pg, redis, workers=workers, extra_env=extra, pool_slots=args.slots)
        started_s = time.monotonic() - t0
        run_id, state = _run(svc, deadline, load)
        rows = db_rows(pg, run_id)
        failures = _failure_logs(root / "af", rows)
    finally:
        if svc is not None:
            svc.stop()
        pg.stop()
        redis.stop()
    if not args.keep and not failures and state == "success":
        shutil.rmtree(root, ignore_errors=True)
    else:
        args.keep = True  # a failed run keeps its logs (the path is in the output)
    states: dict[str, int] = {}
    for r in rows:
        if r["task_id"] == "trial":
            states[str(r["state"])] = states.get(str(r["state"]), 0) + 1
    out = {"planned_trials": n, "dag_run_state": state, "trial_states": states, "deploy_start_s": round(started_s, 1),
           "slots": args.slots, "workers": args.workers, "concurrency": args.concurrency, "trial_s": args.trial_s,
           "settings": list(args.set), "loadavg_mean": round(statistics.fmean(load), 2) if load else None,
           "loadavg_max": round(max(load), 2) if load else None, "machine": machine(), "kept": str(root) if args.keep else None,
           "failures": failures}
    if state != "timeout":
        out.update(analyse(rows, capacity, args.trial_s))
    return out


def report(res: dict[str, Any]) -> list[str]:
    keys = ["planned_trials", "dag_run_state", "trial_states", "capacity", "peak_concurrency", "latency_n",
            "latency_median_s", "latency_p95_s", "latency_max_s", "latency_to_queued_median_s",
            "latency_to_queued_p95_s", "first_start_after_prepare_s", "fill_s",
            "task_duration_median_s", "task_duration_max_s", "makespan_s", "bound_s", "makespan_ratio",
            "runtime_bound_s", "other_tasks_s", "deploy_start_s", "loadavg_mean", "loadavg_max", "settings"]
    print(table(["figure", "value"], [(k, res.get(k)) for k in keys if k in res]))
    lines = []
    if res.get("latency_median_s") is not None:
        lines.append(goal("scheduling latency, median", res["latency_median_s"], GOAL_MEDIAN_LATENCY_S, unit="s"))
    if res.get("makespan_ratio") is not None:
        lines.append(goal("makespan / packing bound", res["makespan_ratio"], GOAL_MAKESPAN_RATIO))
    for line in lines:
        print(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=693, help="mapped trial tasks (rounded up to cells of 7)")
    ap.add_argument("--trial-s", type=float, default=3.0, help="seconds each stand-in trial runs")
    ap.add_argument("--slots", type=int, default=8, help="slots of the trial pool (dlperf_nodes)")
    ap.add_argument("--workers", type=int, default=2, help="Celery workers (own HOME and work_dir each)")
    ap.add_argument("--concurrency", type=int, default=4, help="Celery concurrency per worker")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION__KEY=VALUE",
                    help="an Airflow setting for every process, e.g. scheduler__max_tis_per_query=64")
    ap.add_argument("--timeout-s", type=float, default=3600, help="give up the DAG run after this long")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, store)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.trials < 1 or args.slots < 1 or args.workers < 1 or args.concurrency < 1:
        ap.error("--trials, --slots, --workers and --concurrency must be >= 1")
    res = run_bench(args)
    report(res)
    save_json(args.json, res)
    if res["dag_run_state"] != "success":
        print(f"DAG run {res['dag_run_state']}: {res['trial_states']}; kept {res['kept']}", file=sys.stderr)
        for what, text in res.get("failures", {}).items():
            print(f"--- {what}:\n{text}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
