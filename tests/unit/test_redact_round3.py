"""Redaction covers an S3 URL with credentials inside a log (AWS secret keys hold '/' and '+'),
presigned-URL signatures, and the controller's own host name, so such a run publishes with none
of them in any stored object (rather than being refused by the leak check, or leaking)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dlperf_tasks.store import RetryPolicy, Store, redact_facts
from dlperf_tasks.store.redact import Redactor
from tests.fixtures.s3 import make_run_dir

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize("line", [
    f"fetch s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/prefix/x.rec",
    f"endpoint=https://robot:{SECRET}@oss.example.com:443/bucket ready",
    f"GET https://bucket.s3.amazonaws.com/k?X-Amz-Signature={SECRET.replace('/', '')}&X-Amz-Expires=60",
])
def test_credentials_in_urls_are_redacted(line):
    out = Redactor().redact_text(line)
    assert SECRET not in out and SECRET.replace("/", "") not in out and "<cred-" in out


def test_a_port_and_path_are_not_taken_for_a_password():
    assert Redactor(kinds="none").redact_text("http://host:8080/a/b@c") == "http://host:8080/a/b@c"


def test_a_run_naming_the_controller_and_an_s3_secret_publishes_without_either(tmp_path, monkeypatch):
    host = "dlperf-ctl-7.corp.example.com"
    monkeypatch.setattr(redact_facts.socket, "gethostname", lambda: host)
    monkeypatch.setattr(redact_facts.socket, "getfqdn", lambda: host)
    rd = make_run_dir(tmp_path / "work", log_lines=3)
    log = rd / "logs" / "gpu-node-a" / "bert_b32_fp32_1.log"
    log.write_text(log.read_text() + f"lease held by {host} pid 12\nctl dlperf-ctl-7 ok\n"
                   f"fetch s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/p\n")
    (rd / "report.md").write_text((rd / "report.md").read_text() + f"\nrun on {host}\n")
    result = json.loads((rd / "result.json").read_text())
    result.setdefault("environment", {})["controller"] = host
    (rd / "result.json").write_text(json.dumps(result))
    store = Store.from_url(f"file://{tmp_path / 'store'}", retry=RetryPolicy(attempts=1, base_delay=0.01,
                                                                             max_delay=0.02))
    store.publish(rd)
    found = subprocess.run(["grep", "-rIl", "-e", "dlperf-ctl", "-e", "wJalrXUtnFEMI", str(tmp_path / "store")],
                           capture_output=True, text=True)
    assert found.stdout == "" and Path(tmp_path / "store" / "runs").is_dir()
