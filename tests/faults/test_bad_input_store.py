"""Bad input: object store settings that cannot work ("an S3 bucket that does not exist,
wrong credentials"), against a REAL SeaweedFS S3 server (tests/fixtures/s3.py).

For a missing bucket, wrong credentials (bad secret, unknown access key), an unreachable endpoint
and malformed store URLs, both the write path (``Store.publish``, ``dlperf publish``) and the read
path (``list_runs``, ``read_result``, ``get_run``, ``dlperf results list``) must fail with a
:class:`StoreError` whose message names the endpoint and the bucket, never shows the secret, and
must leave nothing in the bucket that looks like a complete run (no ``manifest.json``, no index
entry). The local spool keeps what was prepared so ``dlperf publish --resume`` can finish later.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import RetryPolicy, Store
from tests.fixtures.s3 import SAMPLE_INVENTORY, make_run_dir

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(attempts=2, base_delay=0.05, max_delay=0.1)
RUN_ID = "mxnet-bert-20260102T030405-abc123"


def all_keys(s3, bucket: str) -> list[str]:
    c = s3.client()
    keys = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bad_settings(s3, case: str, bucket: str) -> dict:
    good = s3.settings(bucket, prefix="dlperf")
    if case == "missing_bucket":
        return dict(good, bucket="no-such-bucket-dlperf")
    if case == "wrong_secret":
        return dict(good, secret_access_key="wrong-secret-0123456789")
    if case == "unknown_access_key":
        return dict(good, access_key_id="AKIAUNKNOWNKEY000000")
    if case == "unreachable_endpoint":
        return dict(good, endpoint_url=f"http://127.0.0.1:{free_port()}")
    raise AssertionError(case)


CASES = ["missing_bucket", "wrong_secret", "unknown_access_key", "unreachable_endpoint"]
WORDS = {"missing_bucket": "does not exist", "wrong_secret": "credentials", "unknown_access_key": "credentials",
         "unreachable_endpoint": "unreachable"}


@pytest.fixture
def bucket(s3_live):
    return s3_live.new_bucket("badinput")


def _check_message(msg: str, settings: dict, case: str) -> None:
    assert settings["endpoint_url"] in msg, msg
    assert settings["bucket"] in msg, msg
    assert WORDS[case] in msg, msg
    assert settings["secret_access_key"] not in msg and "wrong-secret" not in msg


@pytest.mark.parametrize("case", CASES)
def test_publish_with_bad_store_is_a_clear_error_and_leaves_no_complete_run(s3_live, bucket, tmp_path, case):
    settings = bad_settings(s3_live, case, bucket)
    run_dir = make_run_dir(tmp_path, run_id=RUN_ID)
    store = Store.from_settings(settings, inventory=SAMPLE_INVENTORY, retry=FAST)
    with pytest.raises(StoreError) as ei:
        store.publish(run_dir)
    _check_message(str(ei.value), settings, case)
    # nothing that looks complete in the real bucket (the good bucket, same server)
    keys = all_keys(s3_live, bucket)
    assert not any(k.endswith("manifest.json") or "/index/" in k for k in keys), keys
    # the spool is kept (manifest prepared locally) for a later `dlperf publish --resume`
    assert (run_dir / "publish-spool" / "objects" / "manifest.json").is_file()


@pytest.mark.parametrize("case", CASES)
def test_read_api_with_bad_store_is_a_clear_error(s3_live, bucket, tmp_path, case):
    good = Store.from_settings(s3_live.settings(bucket, prefix="dlperf"), inventory=SAMPLE_INVENTORY, retry=FAST)
    good.publish(make_run_dir(tmp_path / "pub", run_id=RUN_ID))
    settings = bad_settings(s3_live, case, bucket)
    store = Store.from_settings(settings, retry=FAST)
    for call in (lambda: store.list_runs(), lambda: store.read_result(RUN_ID), lambda: store.locate(RUN_ID),
                 lambda: store.get_run(RUN_ID, tmp_path / "got")):
        with pytest.raises(StoreError) as ei:
            call()
        _check_message(str(ei.value), settings, case)
    assert not (tmp_path / "got" / "manifest.json").exists()
    assert good.is_complete(RUN_ID)  # the real store was not disturbed


@pytest.mark.parametrize("case", CASES)
def test_cli_publish_and_results_with_bad_store_exit_2_without_traceback(s3_live, bucket, tmp_path, case):
    settings = bad_settings(s3_live, case, bucket)
    url = (f"s3://{settings['bucket']}/dlperf?endpoint={settings['endpoint_url']}&addressing_style=path")
    env = dict(os.environ, PYTHONPATH=str(ROOT), DLPERF_S3_ACCESS_KEY_ID=settings["access_key_id"],
               DLPERF_S3_SECRET_ACCESS_KEY=settings["secret_access_key"])
    run_dir = make_run_dir(tmp_path, run_id=RUN_ID, log_lines=5)
    for argv in (["publish", str(run_dir), "--store", url, "--retries", "1"],
                 ["results", "ls", "--store", url]):
        r = subprocess.run([sys.executable, "-m", "dlperf_tasks", *argv], capture_output=True, text=True,
                           env=env, timeout=120, cwd=ROOT)
        assert r.returncode == 2, (argv, r.returncode, r.stdout, r.stderr)
        # one informational line naming the store that was read, then the one-line error
        lines = r.stderr.splitlines()
        assert lines[0].startswith("store: ") and "(from --store)" in lines[0], r.stderr
        assert len(lines) == 2 and lines[1].startswith("dlperf: error: ") and "Traceback" not in r.stderr, r.stderr
        _check_message(r.stderr, settings, case)
    assert not any(k.endswith("manifest.json") for k in all_keys(s3_live, bucket))


@pytest.mark.parametrize("url, words", [
    ("s3://", "bucket"),
    ("s3:///prefix", "bucket"),
    ("ftp://host/x", "ftp"),
    ("s3://bucket/../up?endpoint=http://127.0.0.1:9", "invalid object path"),
    ("s3://bucket/p?endpoint=http://127.0.0.1:9&addressing_style=sideways", "addressing_style"),
    ("s3://bucket/p?endpoint=http://127.0.0.1:9&colour=blue", "colour"),
    ("s3://bucket/p?endpoint=not-a-url", "endpoint"),
    ("file://", "file"),
])
def test_malformed_store_urls_name_the_problem(tmp_path, url, words):
    with pytest.raises(StoreError) as ei:
        Store.from_url(url).publish(make_run_dir(tmp_path, run_id=RUN_ID, log_lines=5))
    assert words in str(ei.value), str(ei.value)


def test_local_store_on_a_file_or_unwritable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    run_dir = make_run_dir(tmp_path / "runs", run_id=RUN_ID, log_lines=5)
    with pytest.raises(StoreError) as ei:
        Store.from_url(f"file://{blocker}").publish(run_dir, inventory=SAMPLE_INVENTORY)
    assert str(blocker) in str(ei.value)
    assert blocker.read_text() == "x"
