"""One settings object: one store setting with one default (where ``make run`` publishes),
explicit > environment > scheduler config > default, and the CLI line naming the store."""

from __future__ import annotations

import pytest

from dlperf_tasks.core import settings as S
from dlperf_tasks.core.settings import Settings, SettingsError


def test_one_default_store_is_the_checkout_run_store(monkeypatch):
    monkeypatch.delenv("DLPERF_STORE_URL", raising=False)
    monkeypatch.delenv("DLPERF_HOME", raising=False)
    s = Settings.load(env={})
    assert s.store_url == f"file://{S.project_root() / '.run' / 'store'}" and s.store_source == "default"
    from dlperf_tasks.store.store import default_store_url

    assert default_store_url() == s.store_url  # the store package has no default of its own


def test_precedence_explicit_env_config_default(tmp_path):
    cfg = {"store_url": "s3://cfg/prefix", "trial_retries": "3", "cluster": "cluster.yaml"}
    get = lambda k, d: cfg.get(k, d)  # noqa: E731
    s = Settings.load(get, env={}, source="[dlperf]")
    assert (s.store_url, s.store_source, s.trial_retries) == ("s3://cfg/prefix", "[dlperf] store_url", 3)
    assert s.cluster == str(S.project_root() / "cluster.yaml")  # the scheduler's relative path: the checkout's
    s = Settings.load(get, env={"DLPERF_STORE_URL": "file:///env"}, source="[dlperf]")
    assert (s.store_url, s.store_source) == ("file:///env", "$DLPERF_STORE_URL")
    s = Settings.load(get, env={"DLPERF_STORE_URL": "file:///env"}, store_url=str(tmp_path))
    assert s.store_url == f"file://{tmp_path}" and s.store_source == "argument"
    assert s.with_store("s3://b/p").describe_store() == "store: s3://b/p (from --store)"


def test_bad_values_name_the_key():
    with pytest.raises(SettingsError, match="store URL ftp://x: unsupported scheme"):
        Settings.load(env={"DLPERF_STORE_URL": "ftp://x"})
    with pytest.raises(SettingsError, match="trial_retries"):
        Settings.load(env={"DLPERF_TRIAL_RETRIES": "many"})
    with pytest.raises(SettingsError, match="redaction"):
        Settings.load(env={"DLPERF_REDACTION": "ips,secrets"})
    s = Settings.load(env={"DLPERF_REDACTION": "none", "DLPERF_NOTIFY_URL": "https://hook.example/x",
                           "DLPERF_CATALOG_PATH": "/a:/b", "DLPERF_POLICY": "fail_fast"})
    assert (s.redaction_spec, s.notify_url, s.catalog_path, s.retry.policy) == \
        ("none", "https://hook.example/x", ("/a", "/b"), "fail_fast")


def test_the_cli_says_which_store_it_read(tmp_path, capsys, monkeypatch):
    from dlperf_tasks.cli import main

    monkeypatch.setenv("DLPERF_STORE_URL", f"file://{tmp_path / 'env-store'}")
    main(["results", "ls"])
    assert f"store: file://{tmp_path / 'env-store'} (from $DLPERF_STORE_URL)" in capsys.readouterr().err
    main(["results", "ls", "--store", str(tmp_path / "other")])
    assert f"store: file://{tmp_path / 'other'} (from --store)" in capsys.readouterr().err
