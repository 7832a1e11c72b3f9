"""Build one DAG per framework from the suite catalog (``Suite.dag`` groups the suites).

    dlperf_mxnet      mxnet-bert, mxnet-resnet50
    dlperf_pytorch    pytorch-bert
    dlperf_tensorflow tensorflow-bert
    dlperf_megatron   megatron-gpt
    dlperf_smoke      smoke

Task graph (same for every DAG)::

    plan -> prepare -> trial (mapped over the planned trials, pool-limited) -> collect
         -> aggregate -> report -> publish (updates Asset dlperf://results/<dag>)
         -> confirm_plan -> confirm_trigger (mapped: one follow-up run per regression finding)
    cleanup: a teardown that always runs (stops leftovers, cleans the nodes)

Adaptive trials (docs/decisions.md): a trial beyond a cell's minimum records itself SKIPPED when the
adaptive rule stopped its cell (the engine trial step calls the hooks of dlperf_tasks/engine/decisions.py); aggregate
adds node health (and quarantines suspects when asked); a regression finding triggers this DAG
again with conf ``{"confirm": plan}``, whose plan step plans the A/B trials
(dlperf_tasks/engine/abconfirm.py) and whose publish step records the verdict instead of publishing.

Parsing does no network I/O and imports nothing heavy: the catalog YAMLs are read
(local files) and every layer below is imported inside the tasks.
"""

from __future__ import annotations

import datetime as _dt
import functools
from typing import Any, Callable

from airflow.sdk import DAG, Asset, task, teardown

from dlperf_tasks.airflow import form
from dlperf_tasks.airflow import params as params_mod
from dlperf_tasks.airflow import settings as settings_mod
from dlperf_tasks.airflow import tasks
from dlperf_tasks.airflow import notifier
from dlperf_tasks.airflow.operators import ConfirmTriggerOperator, TrialOperator
from dlperf_tasks.airflow.lazy import lazy_module
# the layers below run inside the tasks only: lazy modules keep them out of every DAG parse
abconfirm, decisions = lazy_module("dlperf_tasks.engine.abconfirm"), lazy_module("dlperf_tasks.engine.decisions")
finish, setup = lazy_module("dlperf_tasks.engine.finish"), lazy_module("dlperf_tasks.engine.setup")
staging, runset = lazy_module("dlperf_tasks.engine.staging"), lazy_module("dlperf_tasks.engine.runset")

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

        from dlperf_tasks.core.errors import DlperfError

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


def dag_description(name: str, suites: list, limit: int = 200) -> str:
    """The DAG's one-line description (the DAG list and page show it): what each suite
    benchmarks, from the first sentence of its catalog description."""
    def first(s) -> str:
        text = " ".join(s.description.split())
        return text.split(". ")[0].split(" (")[0].rstrip(".")

    if len(suites) == 1:
        text = f"{name}: {first(suites[0])}"
    else:
        text = f"{name}: " + "; ".join(f"{s.id}: {first(s).split(' with ')[0]}" for s in sorted(suites, key=lambda s: s.id))
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def schedule_note(name: str, suites: list, cfg) -> str:
    """What the DAG page says about its schedule (armed or not, and how to change it)."""
    cron = cfg.schedule(name, suites)
    if cron:
        return (f"**Schedule:** `{cron}` (UTC) while the DAG is unpaused "
                f"(`[dlperf] nightly` / `schedule_{name}`).")
    try:
        nightly = cfg.catalog_schedule(name, suites)
    except settings_mod.SettingsError:
        nightly = None
    how = (f"`[dlperf] nightly = true` in airflow.cfg arms its nightly cron `{nightly}` (UTC)" if nightly
           else f"`[dlperf] schedule_{name} = <cron>` gives it one")
    return (f"**Schedule: none, manual triggers only** in this deployment: unpausing it starts nothing "
            f"by itself (the trigger form's Unpause box unpauses even when Airflow refuses the conf). {how}.")


def _doc(name: str, suites: list, cfg=None) -> str:
    lines = [f"# dlperf {name}", "", "Benchmarks the DLPerf way: plan -> prepare -> trials -> collect -> "
             "aggregate -> report -> publish, cleanup always runs.", "", "| suite | model | description |",
             "| --- | --- | --- |"]
    for s in suites:
        lines.append(f"| `{s.id}` | {s.model} | {' '.join(s.description.split())} |")
    lines += ["", "Trigger with the form (or a conf); empty fields mean the suite's defaults."]
    if cfg is not None:
        lines += ["", schedule_note(name, suites, cfg)]
    return "\n".join(lines)


def timetable(cron: str | None):
    """The cron trigger timetable of :mod:`dlperf_tasks.airflow.timetable`: no start date, and
    without catchup the next run is never a past slot, also for a DAG that ran before and was
    paused over slots. Unpausing a GPU DAG must not start a sweep."""
    from dlperf_tasks.airflow.timetable import nightly

    return nightly(cron)


def _run_note(published: list, summaries: list) -> str:
    """The DAG run's note: per published run, its headline table and a link to its results page."""
    from airflow.configuration import conf as airflow_conf

    from dlperf_tasks.history.links import run_note

    cells = {s.get("run_id"): s.get("cells") or [] for s in summaries}
    return run_note([{**p, "cells": cells.get(p["run_id"], [])} for p in published],
                    airflow_conf.get("api", "base_url", fallback=""))


def _plan_confirm(name: str, suite_ids: list[str], conf: dict, cfg, dag_run_id: str):
    """The plan step of a confirmation run (conf ``{"confirm": ...}``): the form's checks, then the A/B plan."""
    try:
        params = params_mod.validate_conf(conf, suite_ids, cfg.policy)
    except params_mod.ParamsError as exc:
        raise tasks.NonRetriable(f"invalid run parameter {exc}") from None
    return runset.RunSet.from_dict(abconfirm.plan_confirm(name, suite_ids, params, cfg, group_run_id=dag_run_id))


def _finish_confirm(plan: dict, cfg, context) -> None:  # plan: the (rebased) run set's dict form
    """The publish step of a confirmation run: judge A/B, record the verdict on the flagged run
    (nothing is published: the A/B runs are evidence, not nightly results), then skip."""
    from airflow.sdk.exceptions import AirflowSkipException

    doc = abconfirm.finish_confirm(plan, finish.engine_store(cfg), dag_run_id=context["dag_run"].run_id,
                               send=notifier.findings_sender(context, cfg.notify_url or ""))
    line = f"{doc['finding']} of {doc['run_id']}: {doc['status']} - {doc.get('note', '')}"
    print(line)
    for k, d in (doc.get("env_diff") or {}).items():
        print(f"  env {k}: {d.get('baseline')} -> {d.get('current')}")
    tasks.set_note(context, f"A/B confirmation: {line}")
    raise AirflowSkipException(f"confirmation run: verdict recorded on {doc['run_id']}; nothing published")


def _confirm_confs(plan: dict, published: list, cfg) -> list[dict]:
    """The follow-up runs to trigger (never from a confirmation or dry run); a failing planner
    never fails the published run."""
    try:
        return abconfirm.trigger_confs(plan, published or [], finish.engine_store(cfg))
    except Exception as exc:  # noqa: BLE001 - like the regression check: the run is published
        print(f"planning the A/B confirmations failed (nothing triggered): {type(exc).__name__}: {exc}")
        return []


def _print_published(published: list) -> None:
    """The publish task's log: each run's location, plots and regression check."""
    for p in published:
        print(f"published {p['run_id']} -> {p['location']}")
        for plot in p.get("plots") or []:
            print(f"  plot {p['location']}/plots/{plot.rsplit('/', 1)[-1]}")
        reg = p.get("regressions") or {}
        if reg.get("error"):
            print(f"  regression check failed (run published anyway): {reg['error']}")
        elif reg.get("findings"):
            print(f"  regression check: {reg['findings']} finding(s): {', '.join(reg.get('cells', []))}")


def build_dag(name: str, suites: list, cfg: settings_mod.DlperfSettings) -> DAG:
    """One DAG for the suites of framework group ``name``."""
    suite_ids = sorted(s.id for s in suites)
    trial_timeout = max(s.timeout_s for s in suites) + 300
    asset = asset_for(name)

    with DAG(
        dag_id=f"{DAG_PREFIX}{name}",
        description=dag_description(name, suites),
        schedule=timetable(cfg.schedule(name, suites)),
        # no start_date: a start date makes the timetable schedule the latest past slot on unpause
        catchup=False,
        max_active_runs=1,
        tags=["dlperf", name],
        params=form.dag_params(suite_ids, cfg.policy),
        doc_md=_doc(name, suites, cfg),
        # failures reach people through Airflow's notifier interface (the dlperf webhook when
        # DLPERF_NOTIFY_URL is set; Slack/e-mail/Apprise notifiers plug in the same way)
        default_args={"owner": "dlperf", "retries": 0,
                      "on_failure_callback": notifier.default_notifiers(cfg.notify_url or "")},
        render_template_as_native_obj=False,
    ) as dag:

        @task(task_id="plan")
        def plan_task(**context) -> list[dict[str, Any]]:
            """Validate the params again in code, plan every suite (no node is touched here).

            Returns the trial items (what ``trial`` maps over); the plan itself goes to XCom key ``plan``.
            A bad conf fails here within seconds, and the error goes into the run's note."""
            dag_run = context["dag_run"]
            conf = dict(getattr(dag_run, "conf", None) or {})
            try:
                staging.pull_group_record(cfg, name, dag_run.run_id)  # a cleared run keeps its run ids
                if conf.get("confirm"):  # a follow-up run a regression finding triggered (A/B)
                    out = _guard(_plan_confirm)(name, suite_ids, conf, cfg, dag_run.run_id)
                else:
                    out = _guard(tasks.plan_run)(name, suite_ids, conf, cfg, dag_run_id=dag_run.run_id)
            except Exception as exc:
                tasks.set_note(context, f"plan failed: {exc}")
                raise
            for run in out.runs:
                print(run.summary)
            if out.dry_run:
                tasks.set_note(context, "dry run: nothing will be published; the trial tasks log the commands")
            staging.leave(out, cfg)  # plan.json to the run's staging area (no shared disk)
            staging.push_group_record(cfg, name, dag_run.run_id)
            # XCom carries dicts: the run set without its items (each trial task gets its own item)
            context["ti"].xcom_push(key="plan", value=out.to_dict(trials=False))
            first, more = decisions.split_items(out.to_dict(), cfg)  # adaptive: a cell's trials beyond its minimum
            context["ti"].xcom_push(key="more", value=more)
            if more:  # the plan's worst case is the fixed count
                print(f"adaptive trials: {len(first)} to {len(first) + len(more)} trials (trial_more: "
                      f"{len(more)} run only while their cell's median is not known well enough)")
            return first

        @task(task_id="prepare", retries=2, retry_delay=_dt.timedelta(seconds=30))
        @_guard
        def prepare_task(plan: dict) -> dict:
            """Registry login, image pull and environment capture on the nodes."""
            run_set = staging.enter(runset.RunSet.from_dict(plan), cfg)
            out = setup.prepare(run_set, cfg)
            staging.leave(run_set, cfg)  # node facts, env capture
            return out

        @task(task_id="collect", trigger_rule="none_failed")  # trial_more maps nothing without adaptive
        @_guard
        def collect_task(plan: dict, results: list, more: list | None, prepared: dict) -> dict:
            """Which trials have a record in their run directory; which logs are missing."""
            results = list(results) + list(more or [])
            # SKIPPED trials (adaptive: not needed) are left out: not invalid, just not run (decisions)
            out = finish.collect_runs(staging.enter(runset.RunSet.from_dict(plan), cfg),
                                      decisions.drop_skipped(results))
            out["commands"] = [c for r in results if r for c in r.get("commands", [])]
            return out

        @task(task_id="aggregate")
        @_guard
        def aggregate_task(plan: dict, collected: dict, prepared: dict, **context) -> list:
            """Cell statistics and every output (result.json, report.md, plots, NCCL transports,
            stragglers, index files) per run."""
            run_set = staging.enter(runset.RunSet.from_dict(plan), cfg)
            decided = decisions.RunDecisions(cfg)  # adaptive summary, node health, quarantine
            out = finish.aggregate_runs(run_set, collected, cfg, source="dag", group_run_id=context["dag_run"].run_id,
                                        decide=decided)
            for d in decided.done:
                print(f"{d['run_id']}: suspect nodes {d['suspects'] or 'none'}, quarantined {d['quarantined'] or 'none'}"
                      + (f", adaptive trials {d['adaptive']['trials_used']} of {d['adaptive']['trials_max']}"
                         if d["adaptive"] else ""))
            staging.leave(run_set, cfg)
            return out

        @task(task_id="report")
        @_guard
        def report_task(plan: dict, summaries: list, collected: dict, **context) -> list:
            """The result table in the task log (and, for a dry run, the commands in the run's note)."""
            from dlperf_tasks.engine.outputs import result_table

            print(result_table(summaries))
            cmds = collected.get("commands") or []
            if plan.get("dry_run"):
                for c in cmds:
                    print(f"dry run, would run: {c}")
                tasks.set_note(context, "dry run (nothing published); would run:\n" + "\n".join(cmds))
            return summaries

        @task(task_id="publish", outlets=[asset])
        @_guard
        def publish_task(plan: dict, summaries: list, collected: dict, **context) -> list:
            """Copy each run to the store (manifest last) and record an asset event."""
            run_set = staging.enter(runset.RunSet.from_dict(plan), cfg)  # publish redacts this worker's copy
            summaries = [staging.rebase_item(s, cfg.work_dir) for s in summaries]
            if run_set.confirm:
                _finish_confirm(run_set.to_dict(), cfg, context)
            published = finish.publish(run_set, summaries, cfg, group=name,
                                       dry_run_commands=collected.get("commands") or [],
                                       notify=notifier.findings_sender(context, cfg.notify_url or ""))
            events = context.get("outlet_events")
            if events is not None and published:
                events[asset].extra = {"runs": [p["run_id"] for p in published],
                                       "locations": [p["location"] for p in published]}
            if run_set.dry_run:
                from airflow.sdk.exceptions import AirflowSkipException

                raise AirflowSkipException("dry run: nothing published (no asset event)")
            _print_published(published)
            tasks.set_note(context, _run_note(published, summaries))
            return published

        @teardown  # not on_failure_fail_dagrun: then the run state would follow cleanup alone
        @task(task_id="cleanup")
        @_guard
        def cleanup_task(**context) -> dict:
            """Always runs: stop leftovers, clean the nodes, release leases (nothing if planning failed)."""
            plan = context["ti"].xcom_pull(task_ids="plan", key="plan")
            return finish.cleanup(runset.RunSet.from_dict(plan).rebased(cfg.work_dir) if plan else None, cfg)

        @task(task_id="adaptive_more")
        def more_items(items: list) -> list:
            """The trials beyond each adaptive cell's minimum (mapped after the first trials; Airflow maps
            only over a task's return value)."""
            return list(items or [])

        planned = plan_task()
        prepared = prepare_task(planned["plan"])
        trial_kw = dict(dlperf_settings=cfg, pool=cfg.pool, retries=cfg.trial_retries,
                        retry_delay=_dt.timedelta(seconds=20), execution_timeout=_dt.timedelta(seconds=trial_timeout),
                        map_index_template="{{ task.item.trial_id }}")
        trials = TrialOperator.partial(task_id="trial", **trial_kw).expand(item=planned)
        # adaptive trials: each cell's trials beyond its minimum start once the first ones
        # finished, read their records and run only while the cell's median is not known well enough
        more = TrialOperator.partial(task_id="trial_more", **trial_kw).expand(item=more_items(planned["more"]))
        prepared >> trials >> more
        collected = collect_task(planned["plan"], trials.output, more.output, prepared)
        summaries = aggregate_task(planned["plan"], collected, prepared)
        reports = report_task(planned["plan"], summaries, collected)
        published = publish_task(planned["plan"], reports, collected)
        # cleanup also waits for every trial: a failed trial fails collect..publish at once, and
        # cleanup must not remove the containers of trials still running
        [published, trials, more] >> cleanup_task()

        @task(task_id="confirm_plan")
        def confirm_plan_task(plan: dict, published: list) -> list:
            """One follow-up run of this DAG per new regression finding: conf {"confirm": A/B plan}."""
            out = _confirm_confs(plan, published, cfg)
            for c in out:
                print(f"A/B confirmation of {c['conf']['confirm']['finding']} ({c['conf']['confirm']['run_id']}): "
                      f"triggering {c['trigger_run_id']}")
            return out

        # a confirmation run never gets here (its publish step skips), so it cannot trigger another
        ConfirmTriggerOperator.partial(task_id="confirm_trigger", trigger_dag_id=f"{DAG_PREFIX}{name}").expand_kwargs(
            confirm_plan_task(planned["plan"], published))
    return dag


def build_all(cfg: settings_mod.DlperfSettings | None = None) -> dict[str, DAG]:
    """Every dlperf DAG, keyed by dag_id. Raises if the catalog has a broken suite."""
    cfg = cfg or settings_mod.load()
    errors: list = []
    groups = suites_by_dag(errors)
    if errors:  # surface as a DAG import error naming the file and key
        raise errors[0]
    return {f"{DAG_PREFIX}{name}": build_dag(name, suites, cfg) for name, suites in sorted(groups.items())}
