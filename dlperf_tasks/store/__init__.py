"""Object storage: publish runs (redacted, manifest last) and read them back.

Quick reference (everything raises :class:`dlperf_tasks.core.errors.StoreError` with the
endpoint/bucket/key in the message)::

    from dlperf_tasks.store import Store

    store = Store.from_url("s3://bucket/prefix?endpoint=http://127.0.0.1:8333&addressing_style=path")
    store = Store.from_url("file:///var/lib/dlperf/store")            # local directory backend
    store = Store.from_settings({"type": "s3", "bucket": "b", "prefix": "dlperf",
                                 "endpoint_url": "https://oss-cn-hangzhou.aliyuncs.com",
                                 "region": "cn-hangzhou", "addressing_style": "virtual"})
    store = Store.from_settings({"connection": aws_conn_dict, "bucket": "b"})
    store = Store.default()            # $DLPERF_STORE_URL or file://~/.local/share/dlperf/store

    # publish (see store/publish.py): spool -> logs -> result/report/plots -> manifest -> index
    res = store.publish(run_dir, inventory=cluster_or_yaml_path)   # res.url, res.uploaded, res.skipped
    store.publish(run_dir, resume=True)                            # finish a failed publish

    # read API (for history / results CLI / the UI plugin)
    store.suites()                                   # suites with an index
    store.list_runs(suite=None, since=None, status=None, limit=None)
        # -> [summary, ...] oldest first, from index/<suite>.json only (no bucket listing);
        #    summary keys: run_id, suite, framework, date, started_at, finished_at, status
        #    (ok|partial|failed), path, manifest_sha256, n_cells,
        #    cells{cell_id: {median_speed, average_speed, speedup, n_valid, n_invalid,
        #    trial_values, metric_kind, unit, topology, batch_size_per_device, precision,
        #    model, ...}}, env{image, image_digest, upstream_commit, dag_run_id, nodes, env}
    store.read_index(suite)                          # raw index document
    store.locate(run_id)                             # {run_id, suite, date, path}
    store.read_manifest(run_id)                      # StoreError if the run is incomplete
    store.read_result(run_id)                        # result JSON dict (sha256-verified)
    store.read_report(run_id)                        # report.md text (verified)
    store.read_object(run_id, "plots/x.png")         # bytes (verified)
    store.get_run(run_id, to_dir)                    # download all, verify every checksum
    store.open_object(key)                           # file object, key relative to the prefix
    store.is_complete(run_id)
    store.annotate_run(run_id, "regressions", doc, index_value=badge)  # annotations/<name>.json
    store.read_annotation(run_id, "regressions")

Credentials come only from the environment (``DLPERF_S3_ACCESS_KEY_ID`` /
``DLPERF_S3_SECRET_ACCESS_KEY``, or boto3's ``AWS_*`` chain) or from an Airflow connection
dict passed in by the scheduler layer; never from URLs or code (URL and settings parsing:
store/location.py). Key names: store/layout.py.
Redaction: store/redact.py. This package imports no Airflow.
"""

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.layout import Layout, validate_run_id
from dlperf_tasks.store.publish import PublishResult, RetryPolicy
from dlperf_tasks.store.redact import Redactor, check_redacted, find_leaks
from dlperf_tasks.store.store import Store, default_store_url

__all__ = ["Store", "StoreError", "Layout", "validate_run_id", "PublishResult", "RetryPolicy", "Redactor",
           "check_redacted", "find_leaks", "default_store_url"]
