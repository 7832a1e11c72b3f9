"""Run a dlperf DAG once, end to end, inside this process (``dag.test()``), and show its result.

``make run`` uses it (via scripts/run-embedded.sh) on the embedded default: SQLite metadata
DB, the ``local`` cluster (this machine) and the local file store.

    python -m dlperf_tasks.airflow.embedded run  --dag dlperf_smoke [--conf '{"trials": 2}']
    python -m dlperf_tasks.airflow.embedded show --dag dlperf_smoke

``AIRFLOW_HOME`` must point at a home prepared by scripts/airflow-env.sh.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load_dag(dag_id: str):
    """The DAG ``dag_id`` from the configured dags folder (the same file the scheduler parses)."""
    from airflow.configuration import conf
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=conf.get("core", "dags_folder"))
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {json.dumps(bag.import_errors, indent=2)}")
    dag = bag.dags.get(dag_id)
    if dag is None:
        raise SystemExit(f"no DAG {dag_id!r}; found: {', '.join(sorted(bag.dags))}")
    return dag


def run(dag_id: str, conf: dict) -> str:
    """Run the DAG once with ``conf``; returns the final DagRun state."""
    dag = load_dag(dag_id)
    dr = dag.test(run_conf=conf)
    return str(getattr(dr.state, "value", dr.state))


def show(dag_id: str) -> int:
    from dlperf_tasks.airflow import settings

    cfg = settings.load()
    name = dag_id.removeprefix("dlperf_")
    path = Path(cfg.work_dir) / f"last-{name}.json"
    if not path.exists():
        print(f"no published run of {dag_id} yet ({path} is missing)", file=sys.stderr)
        return 1
    last = json.loads(path.read_text())
    print(last["table"])
    print()
    if last.get("dry_run"):
        print("dry run: nothing was published; the trials would have run:")
        for c in last.get("commands") or []:
            print(f"  {c}")
        return 0
    from dlperf_tasks.core.safeurl import safe_url

    print(f"store {safe_url(last.get('store') or cfg.store_url)} (.venv/bin/dlperf results ls / show / compare read the same store)")
    for p in last["published"]:
        print(f"run {p['run_id']} (suite {p['suite']})")
        print(f"  result JSON : {p['location']}/result.json")
        print(f"  Markdown    : {p['location']}/report.md")
        plots = [Path(x).name for x in p.get("plots") or []]
        print(f"  plots       : {p['location']}/plots/ ({', '.join(plots)})" if plots else "  plots       : none")
        print(f"  logs        : {p['location']}/logs/")
        reg = p.get("regressions") or {}
        if reg:
            print(f"  regressions : {reg['error']} (check failed; run published)" if reg.get("error") else
                  f"  regressions : {reg.get('basis_line') or str(reg.get('findings', 0)) + ' finding(s)'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlperf_tasks.airflow.embedded", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a DAG once through Airflow (dag.test) and exit non-zero if it failed")
    r.add_argument("--dag", default="dlperf_smoke", help="DAG id (default dlperf_smoke)")
    r.add_argument("--conf", default="{}", help="run conf as JSON, e.g. '{\"trials\": 2}'")
    s = sub.add_parser("show", help="print the result table and where the last published run is")
    s.add_argument("--dag", default="dlperf_smoke", help="DAG id (default dlperf_smoke)")
    args = parser.parse_args(argv)
    if args.cmd == "show":
        return show(args.dag)
    try:
        conf = json.loads(args.conf)
    except json.JSONDecodeError as exc:
        parser.error(f"--conf is not JSON: {exc}")
    if not isinstance(conf, dict):
        parser.error("--conf must be a JSON object")
    state = run(args.dag, conf)
    print(f"DAG run of {args.dag} finished: {state}")
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
