"""Build one DAG per framework from the suite catalog (``Suite.dag`` groups the suites).

    dlperf_mxnet      mxnet-bert, mxnet-resnet50
    dlperf_pytorch    pytorch-bert
    dlperf_tensorflow tensorflow-bert
    dlperf_megatron   megatron-gpt
    dlperf_smoke      smoke

Task graph (same for every DAG)::

    plan -> prepare -> trial (mapped over the planned trials, pool-limited) -> collect
         -> aggregate -> report -> publish (updates Asset dlperf://results/<dag>)
    cleanup: a teardown that always runs (stops leftovers, cleans the nodes)

Parsing does no network I/O and imports nothing heavy: the catalog YAMLs are read
(local files) and every layer below is imported inside the tasks.
"""

from __future__ import annotations

import datetime as _dt
import functools
from typing import Any, Callable

from airflow.sdk import DAG, Asset, task, teardown

from dlperf_tasks.airflow import params as params_mod
from dlperf_tasks.airflow import settings as settings_mod
from dlperf_tasks.airflow import tasks
from dlperf_tasks.airflow.operators import TrialOperator

START = _dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc)
DAG_PREFIX = "dlperf_"


def asset_for(dag_name: str) -> Asset:
    """The Asset a DAG's publish task updates: ``dlperf://results/<dag>``."""
    return Asset(f"dlperf://results/{dag_name}", group="dlperf")


def _guard(fn: Callable) -> Callable:
    """Translate dlperf failures into Airflow's: non-retriable -> AirflowFailException."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from dlperf_tasks.errors import DlperfError

        try:
            return fn(*args, **kwargs)
        except tasks.Retriable as exc:
            raise AirflowException(str(exc)) from None
        except (tasks.NonRetriable, DlperfError) as exc:
            raise AirflowFailException(str(exc)) from None

    return wrapper


def suites_by_dag(errors: list | None = None) -> dict[str, list]:
    """``{dag name: [Suite, ...]}`` from the catalog (broken suites go to ``errors``)."""
    from dlperf_tasks.catalog.loader import list_suites

    groups: dict[str, list] = {}
    for suite in list_suites(errors=errors if errors is not None else []):
        groups.setdefault(suite.dag, []).append(suite)
    return groups


def _doc(name: str, suites: list) -> str:
    lines = [f"# dlperf {name}", "", "Benchmarks the DLPerf way: plan -> prepare -> trials -> collect -> "
             "aggregate -> report -> publish, cleanup always runs.", "", "| suite | model | description |",
             "| --- | --- | --- |"]
    for s in suites:
        lines.append(f"| `{s.id}` | {s.model} | {' '.join(s.description.split())} |")
    lines += ["", "Trigger with the form (or a conf); empty fields mean the suite's defaults."]
    return "\n".join(lines)


def build_dag(name: str, suites: list, cfg: settings_mod.DlperfSettings) -> DAG:
    """One DAG for the suites of framework group ``name``."""
    suite_ids = sorted(s.id for s in suites)
    trial_timeout = max(s.timeout_s for s in suites) + 300
    asset = asset_for(name)

    with DAG(
        dag_id=f"{DAG_PREFIX}{name}",
        description=f"dlperf benchmarks: {', '.join(suite_ids)}",
        schedule=cfg.schedule(name),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["dlperf", name],
        params=params_mod.dag_params(suite_ids, cfg.policy),
        doc_md=_doc(name, suites),
        default_args={"owner": "dlperf", "retries": 0},
        render_template_as_native_obj=False,
    ) as dag:

        @task(task_id="plan")
        @_guard
        def plan_task(**context) -> list[dict[str, Any]]:
            """Validate the params again in code, plan every suite (no node is touched here).

            Returns the trial items (what ``trial`` maps over); the plan itself goes to XCom key ``plan``."""
            dag_run = context["dag_run"]
            conf = dict(getattr(dag_run, "conf", None) or {})
            out = tasks.plan_run(name, suite_ids, conf, cfg, dag_run_id=dag_run.run_id)
            for run in out["runs"]:
                print(run["summary"])
            context["ti"].xcom_push(key="plan", value={k: v for k, v in out.items() if k != "trials"})
            return out["trials"]

        @task(task_id="prepare", retries=2, retry_delay=_dt.timedelta(seconds=30))
        @_guard
        def prepare_task(plan: dict) -> dict:
            """Registry login, image pull and environment capture on the nodes."""
            return tasks.prepare(plan, cfg)

        @task(task_id="collect")
        @_guard
        def collect_task(plan: dict, results: list, prepared: dict) -> dict:
            """Group the trial results per run and fetch every log into the run's log tree."""
            return tasks.collect(plan, list(results), cfg)

        @task(task_id="aggregate")
        @_guard
        def aggregate_task(plan: dict, collected: dict, prepared: dict, **context) -> list:
            """Cell statistics (median, average, speedup) -> result.json per run."""
            return tasks.aggregate(plan, collected, prepared, dag_run_id=context["dag_run"].run_id)

        @task(task_id="report")
        @_guard
        def report_task(plan: dict, summaries: list) -> list:
            """report.md (+ plots) per run, and the result table in the task log."""
            print(tasks.result_table(summaries))
            return tasks.report(plan, summaries)

        @task(task_id="publish", outlets=[asset])
        @_guard
        def publish_task(reports: list, summaries: list, **context) -> list:
            """Copy each run to the store (manifest last) and record an asset event."""
            published = tasks.publish(reports, cfg, dag_name=name, summaries=summaries)
            events = context.get("outlet_events")
            if events is not None:
                events[asset].extra = {"runs": [p["run_id"] for p in published],
                                       "locations": [p["location"] for p in published]}
            for p in published:
                print(f"published {p['run_id']} -> {p['location']}")
                for plot in p.get("plots") or []:
                    print(f"  plot {p['location']}/plots/{plot.rsplit('/', 1)[-1]}")
                reg = p.get("regressions") or {}
                if reg.get("error"):
                    print(f"  regression check failed (run published anyway): {reg['error']}")
                elif reg.get("findings"):
                    print(f"  regression check: {reg['findings']} finding(s): {', '.join(reg.get('cells', []))}")
            return published

        @teardown  # not on_failure_fail_dagrun: then the run state would follow cleanup alone
        @task(task_id="cleanup")
        @_guard
        def cleanup_task(**context) -> dict:
            """Always runs: stop leftovers, clean the nodes, release leases (nothing if planning failed)."""
            plan = context["ti"].xcom_pull(task_ids="plan", key="plan")
            return tasks.cleanup(plan, cfg)

        planned = plan_task()
        prepared = prepare_task(planned["plan"])
        trials = TrialOperator.partial(
            task_id="trial", dlperf_settings=cfg, pool=cfg.pool, retries=cfg.trial_retries,
            retry_delay=_dt.timedelta(seconds=20), execution_timeout=_dt.timedelta(seconds=trial_timeout),
            map_index_template="{{ task.item.trial_id }}",
        ).expand(item=planned)
        prepared >> trials
        collected = collect_task(planned["plan"], trials.output, prepared)
        summaries = aggregate_task(planned["plan"], collected, prepared)
        reports = report_task(planned["plan"], summaries)
        published = publish_task(reports, summaries)
        # cleanup also waits for every trial: a failed trial fails collect..publish at once, and
        # cleanup must not remove the containers of trials still running
        [published, trials] >> cleanup_task()
    return dag


def build_all(cfg: settings_mod.DlperfSettings | None = None) -> dict[str, DAG]:
    """Every dlperf DAG, keyed by dag_id. Raises if the catalog has a broken suite."""
    cfg = cfg or settings_mod.load()
    errors: list = []
    groups = suites_by_dag(errors)
    if errors:  # surface as a DAG import error naming the file and key
        raise errors[0]
    return {f"{DAG_PREFIX}{name}": build_dag(name, suites, cfg) for name, suites in sorted(groups.items())}
