"""The one run engine: every entry point (``dlperf sweep`` in-process, each task of a scheduled
DAG) drives these steps, as plain functions over one run-directory model.

    plan      setup.plan_runs(group, suite_ids, params, settings, group_run_id=None, run_dirs=None) -> run set
    prepare   setup.prepare(run_set, settings)                 (every node; sweep: setup.prepare_nodes)
    trials    trials.run_item(item, settings, attempt=TaskTry()) -> trial record (attempt.py)
              schedule.run_scheduled(todo, batch, cluster, held, pool, runtime, facts)   (sweep: packing)
              trials.stop_trial(item, settings)
    collect   finish.collect_runs(run_set, records)            outputs.collect(rd, trials)
    aggregate finish.aggregate_runs(run_set, collected, settings, source, group_run_id, decide)
              outputs.aggregate(rd, results, suite, source, decide=...) -> result (report.md, plots,
              index files, run.env.nccl_transport, run.stragglers, the decisions' run.adaptive /
              run.node_health; then result.json, once)
    publish   finish.publish(run_set, summaries, settings, group, dry_run_commands) (dry run: nothing)
    cleanup   finish.cleanup(run_set, settings)

Run directory, run ids and trial records: :mod:`.rundir` (``RunDir``, ``new_run_id``); the
record's encoding is ``report.result_json.trial_record``. Failures: :mod:`.errors`
(``Retriable`` / ``NonRetriable``). Progress lines: :mod:`.progress`.
"""
