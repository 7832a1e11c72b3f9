"""Benchmark: how long parsing the dags/ folder takes (Airflow re-parses it every 30 s).

    .venv/bin/python bench/bench_dag_parse.py             # 7 fresh interpreters + `airflow dags report`
    .venv/bin/python bench/bench_dag_parse.py --runs 3 --no-report

1. Import time of every file in dags/ in a fresh interpreter, median of ``--runs``:
   ``dags`` = executing the DAG files once ``airflow.sdk`` is already imported (what the DAG
   processor pays per parse: it has Airflow loaded), ``cold`` = including ``import airflow.sdk``.
2. Airflow's own view: ``airflow dags report -o json`` (file, duration, DAG and task counts),
   in an isolated AIRFLOW_HOME in a temp dir, set up by scripts/airflow-env.sh (renders
   airflow.cfg.template, ``airflow db migrate``).

Goal: parsing the whole dags/ folder < 0.3 s. Exit status: 0 unless something really failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, BenchError, goal, machine, save_json, table  # noqa: E402

GOAL_S = 0.3
AIRFLOW = Path(sys.executable).with_name("airflow")

_CHILD = r"""
import glob, importlib.util, json, os, sys, time
t0 = time.perf_counter()
import airflow.sdk  # noqa: F401
t1 = time.perf_counter()
dags = 0
for i, f in enumerate(sorted(glob.glob(os.path.join(sys.argv[1], "*.py")))):
    spec = importlib.util.spec_from_file_location(f"bench_dagfile_{i}", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from airflow.sdk import DAG
    dags += sum(1 for v in vars(mod).values() if isinstance(v, DAG))
t2 = time.perf_counter()
print(json.dumps({"airflow_import_s": t1 - t0, "dags_s": t2 - t1, "cold_s": t2 - t0, "dags": dags}))
"""


def airflow_home(tmp: Path) -> dict[str, str]:
    """An isolated AIRFLOW_HOME set up by scripts/airflow-env.sh; returns the environment to use it."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("AIRFLOW__") or k in ("AIRFLOW_HOME", "AIRFLOW_CONFIG"):
            env.pop(k)
    env.update({"AIRFLOW_HOME": str(tmp / "airflow"), "API_PORT": "18793", "PYTHON": sys.executable})
    script = ROOT / "scripts" / "airflow-env.sh"
    if not script.exists():
        raise BenchError(f"{script} is missing (the airflow part sets up AIRFLOW_HOME with it)")
    p = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    if p.returncode != 0:
        raise BenchError(f"scripts/airflow-env.sh failed (exit {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    env["AIRFLOW_CONFIG"] = str(tmp / "airflow" / "airflow.cfg")
    return env


def import_times(dags_dir: Path, runs: int, env: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for _ in range(runs):
        p = subprocess.run([sys.executable, "-c", _CHILD, str(dags_dir)], env=env, capture_output=True, text=True,
                           timeout=300, cwd=str(ROOT))
        if p.returncode != 0:
            raise BenchError(f"importing {dags_dir} failed:\n{p.stderr[-3000:]}")
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def _seconds(v: Any) -> float:
    """``dags report`` durations: a number or a timedelta string like ``0:00:00.245312``."""
    if isinstance(v, (int, float)):
        return float(v)
    m = re.match(r"^(?:(\d+) days?, )?(\d+):(\d+):(\d+(?:\.\d+)?)$", str(v).strip())
    if not m:
        raise BenchError(f"cannot read duration {v!r} from 'airflow dags report'")
    d, h, mi, s = m.groups()
    return int(d or 0) * 86400 + int(h) * 3600 + int(mi) * 60 + float(s)


def dags_report(env: dict[str, str], runs: int) -> list[list[dict[str, Any]]]:
    out = []
    for _ in range(runs):
        p = subprocess.run([str(AIRFLOW), "dags", "report", "-o", "json"], env=env, capture_output=True, text=True,
                           timeout=600, cwd=str(ROOT))
        if p.returncode != 0:
            raise BenchError(f"airflow dags report failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        for line in reversed(p.stdout.splitlines()):  # warnings may come first; the JSON list is one line
            if line.startswith("[{") or line.strip() == "[]":
                out.append(json.loads(line))
                break
        else:
            raise BenchError(f"airflow dags report printed no JSON list:\n{p.stdout[-2000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--runs", type=int, default=7, help="fresh interpreters to take the median of (default 7)")
    ap.add_argument("--report-runs", type=int, default=3, help="'airflow dags report' runs (default 3)")
    ap.add_argument("--no-report", action="store_true", help="skip 'airflow dags report' (and the DB migration)")
    ap.add_argument("--dags-dir", default=str(ROOT / "dags"), help="folder of DAG files (default: dags/)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    a = ap.parse_args(argv)
    if a.runs < 1 or a.report_runs < 1:
        ap.error("--runs and --report-runs must be >= 1")
    dags_dir = Path(a.dags_dir)
    if not dags_dir.is_dir():
        ap.error(f"--dags-dir {dags_dir} is not a directory")
    tmp = Path(tempfile.mkdtemp(prefix="dlperf-bench-dagparse-"))
    results: dict[str, Any] = {"machine": machine()}
    try:
        if a.no_report:
            env = dict(os.environ)
            env.update({"AIRFLOW_HOME": str(tmp / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
            (tmp / "airflow").mkdir()
        else:
            print(f"setting up an isolated AIRFLOW_HOME in {tmp} (scripts/airflow-env.sh, db migrate) ...", flush=True)
            env = airflow_home(tmp)
        runs = import_times(dags_dir, a.runs, env)
        med = {k: statistics.median(r[k] for r in runs) for k in ("airflow_import_s", "dags_s", "cold_s")}
        results.update({"runs": runs, "median": med, "dags": runs[0]["dags"]})
        rows = [["dags/ files (airflow.sdk already imported)", f"{med['dags_s']:.3f}",
                 f"{min(r['dags_s'] for r in runs):.3f}-{max(r['dags_s'] for r in runs):.3f}"],
                ["import airflow.sdk", f"{med['airflow_import_s']:.3f}",
                 f"{min(r['airflow_import_s'] for r in runs):.3f}-{max(r['airflow_import_s'] for r in runs):.3f}"],
                ["cold: airflow.sdk + dags/", f"{med['cold_s']:.3f}",
                 f"{min(r['cold_s'] for r in runs):.3f}-{max(r['cold_s'] for r in runs):.3f}"]]
        report_rows = []
        if not a.no_report:
            reps = dags_report(env, a.report_runs)
            files: dict[str, list[float]] = {}
            info: dict[str, dict[str, Any]] = {}
            for rep in reps:
                for row in rep:
                    files.setdefault(row["file"], []).append(_seconds(row["duration"]))
                    info[row["file"]] = row
            results["dags_report"] = {f: {"median_s": statistics.median(v), "dag_num": info[f]["dag_num"],
                                          "task_num": info[f]["task_num"], "dags": info[f]["dags"]}
                                      for f, v in files.items()}
            for f, v in files.items():
                report_rows.append([f, f"{statistics.median(v):.3f}", info[f]["dag_num"], info[f]["task_num"],
                                    ", ".join(info[f]["dags"])])
            if not files:
                raise BenchError("airflow dags report found no DAG file (is [core] dags_folder = dags/?)")
        print()
        print(f"parse time of {dags_dir} in seconds, {a.runs} fresh interpreters ({machine()}); "
              f"{results['dags']} DAGs")
        print(table(["what", "median s", "min-max"], rows))
        if report_rows:
            print()
            print(f"airflow dags report (median of {a.report_runs})")
            print(table(["file", "duration s", "dags", "tasks", "dag ids"], report_rows))
        print()
        print(goal("dags/ parse time (Airflow loaded)", med["dags_s"], GOAL_S, unit="s"))
        if report_rows:
            total = sum(results["dags_report"][f]["median_s"] for f in results["dags_report"])
            results["dags_report_total_s"] = total
            print(goal("airflow dags report total", total, GOAL_S, unit="s"))
        save_json(a.json, results)
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"bench_dag_parse: error: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
