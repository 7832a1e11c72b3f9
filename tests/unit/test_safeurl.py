"""A store URL carrying credentials is never printed (only scheme, host, bucket,
prefix and the store's non-secret parameters) and is refused on every scheme, in one line that
does not repeat the secret."""

from __future__ import annotations

import pytest

from dlperf_tasks.cli import main
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.safeurl import credential_problem, safe_url
from dlperf_tasks.core.settings import Settings, SettingsError
from dlperf_tasks.store.s3backend import S3Settings
from dlperf_tasks.store.store import Store

SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYzzSECRET"

HOSTILE = [
    f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/prefix",
    f"s3://{SECRET}@bucket/prefix",
    f"file:///tmp/store?password={SECRET}",
    f"file:///tmp/store?token={SECRET}",
    f"file:///tmp/store#secret={SECRET}",
    f"s3://bucket/p?endpoint=http://127.0.0.1:8333&secret_access_key={SECRET}",
    f"s3://bucket/p?endpoint=http://AKIA:{SECRET}@127.0.0.1:8333",
    f"s3://bucket/p?X-Amz-Signature={SECRET}",
    f"s3://bucket/p?X-Amz-Credential={SECRET}",
    f"s3://bucket/p?api_key={SECRET}",
    f"oss://bucket/p?AccessKey={SECRET}",
    f"s3://bucket/p?Pass%77ord={SECRET}",  # percent-encoded name
    # the secret where a parameter's name stands: a bare fragment, a name-only query, a nested one
    f"file:///tmp/store#{SECRET}",
    f"s3://bucket/p#{SECRET}&region=x",
    f"s3://bucket/p?{SECRET}",
    f"s3://bucket/p?{SECRET}=1",
    f"s3://bucket/p?endpoint=http://127.0.0.1:8333/?{SECRET}",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_credential_urls_are_refused_in_one_line_without_the_secret(url):
    assert credential_problem(url)
    with pytest.raises(SettingsError) as exc:
        Settings.load(env={"DLPERF_STORE_URL": url})
    assert SECRET not in str(exc.value) and "\n" not in str(exc.value) and "refused" in str(exc.value)
    with pytest.raises(SettingsError) as exc:
        Settings(store_url="file:///x").with_store(url)
    assert SECRET not in str(exc.value)
    with pytest.raises(StoreError) as exc:
        Store.from_url(url)
    assert SECRET not in str(exc.value) and "refused" in str(exc.value)
    assert SECRET not in safe_url(url)


@pytest.mark.parametrize("url", [f"s3://AKIA:{SECRET}@b/p", f"file:///tmp/st?password={SECRET}"])
def test_results_ls_never_prints_a_credential_url(url, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("DLPERF_HOME", str(tmp_path))
    monkeypatch.setenv("DLPERF_STORE_URL", url)
    rc = main(["results", "ls"])
    out, err = capsys.readouterr()
    assert rc == 2 and SECRET not in out + err
    assert err.count("\n") == 1 and "refused" in err and "Traceback" not in err
    rc = main(["results", "ls", "--store", url.replace("AKIA", "AKIB")])
    out, err = capsys.readouterr()
    assert rc == 2 and SECRET not in out + err and "refused" in err


def test_safe_url_keeps_scheme_host_bucket_prefix_only():
    assert safe_url("s3://K:S@bucket/some/prefix") == "s3://bucket/some/prefix"
    assert (safe_url("s3://b/p?endpoint=http://u:pw@10.0.0.1:8333/&region=r&other=zz&token=tt#frag")
            == "s3://b/p?endpoint=http://10.0.0.1:8333/&region=r")
    assert safe_url("file:///data/store?password=zz") == "file:///data/store"
    assert safe_url("s3://b/p\x1b]0;owned\x07\x9b2J") == "s3://b/p%1B]0;owned%07%9B2J"  # no terminal control
    assert safe_url("s3://[broken") == "<unreadable URL>"
    assert safe_url("/plain/dir") == "/plain/dir"


def test_plain_urls_pass_and_describe_store_uses_the_safe_form():
    for url in ("s3://b/p?endpoint=http://127.0.0.1:8333&region=us-east-1&addressing_style=path",
                "file:///tmp/x", "/tmp/some dir@host"):
        assert credential_problem(url) is None, url
        Settings.load(env={"DLPERF_STORE_URL": url})
    s = Settings(store_url=f"s3://K:{SECRET}@b/p", store_source="test")  # built directly, never validated
    assert s.describe_store() == "store: s3://b/p (from test)"


def test_s3_endpoint_with_credentials_is_refused_by_the_same_rule():
    for ep in (f"http://AKIA:{SECRET}@127.0.0.1:8333", f"http://127.0.0.1:8333/?x-amz-security-token={SECRET}",
               f"http://127.0.0.1:8333/?sig={SECRET}"):
        with pytest.raises(StoreError) as exc:
            S3Settings(bucket="b", endpoint_url=ep)
        assert SECRET not in str(exc.value)
    S3Settings(bucket="b", endpoint_url="http://127.0.0.1:8333")


def test_engine_messages_and_last_json_use_the_safe_form(tmp_path):
    from dlperf_tasks.engine.errors import NonRetriable
    from dlperf_tasks.engine.storeaccess import engine_store

    s = Settings(store_url=f"s3://b/p?endpoint=http://K:{SECRET}@127.0.0.1:1", store_source="test")
    with pytest.raises(NonRetriable) as exc:
        engine_store(s)
    assert SECRET not in str(exc.value) and "127.0.0.1:1" in str(exc.value)


def test_an_unsupported_scheme_is_named_only_when_it_is_a_scheme():
    from dlperf_tasks.core.safeurl import scheme_problem

    assert "'gs://'" in scheme_problem("gs://bucket/p")
    for url in (f"u:{SECRET}@x://bucket", f"{SECRET}#frag://x"):
        problem = scheme_problem(url)
        assert problem and SECRET not in problem and "\n" not in problem
