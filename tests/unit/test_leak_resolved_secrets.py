"""The pre-publish leak check covers every secret the process resolved, not only the
secret-looking environment variables: inventory passwords, key texts and passphrases, registry
passwords (``password_env`` of any name), connection passwords and extras (nodes and the store).
A trial log that prints one is refused before anything is uploaded, and the refusal never shows it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from dlperf_tasks.core import resolved_secrets
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import RetryPolicy, Store
from tests.fixtures.s3 import SAMPLE_INVENTORY, make_run_dir

FAST = RetryPolicy(attempts=1, base_delay=0.01, max_delay=0.02)
PLAIN = "Zq8xT4kP2mW9vB7n"  # a password with no credential shape: only an exact list can catch it


@pytest.fixture(autouse=True)
def _fresh_registry():
    resolved_secrets.forget_all()
    yield
    resolved_secrets.forget_all()


def _run_with(tmp_path: Path, secret: str) -> Path:
    rd = make_run_dir(tmp_path / "work", log_lines=3)
    log = rd / "logs" / "gpu-node-a" / "bert_b32_fp32_1.log"
    log.write_text(log.read_text() + f"debug: handshake blob {secret} accepted\n")
    return rd


def _store(tmp_path: Path) -> Store:
    return Store.from_url(f"file://{tmp_path / 'store'}", retry=FAST)


def _inventory(tmp_path: Path, **changes) -> Path:
    inv = {**SAMPLE_INVENTORY, "nodes": [dict(n) for n in SAMPLE_INVENTORY["nodes"]]}
    for key, value in changes.items():
        if key == "registry":
            inv["registry"] = value
        else:
            inv["nodes"][0][key] = value
    p = tmp_path / "inventory.yaml"
    p.write_text(yaml.safe_dump(inv))
    return p


def _refused(tmp_path: Path, rd: Path, secret: str, **publish) -> None:
    with pytest.raises(StoreError, match="planted secret") as exc:
        _store(tmp_path).publish(rd, **publish)
    assert secret not in str(exc.value)
    assert not (tmp_path / "store" / "runs").exists()  # nothing uploaded


def test_an_inventory_node_password_printed_in_a_log_is_refused(tmp_path):
    rd = _run_with(tmp_path, PLAIN)
    _refused(tmp_path, rd, PLAIN, inventory=str(_inventory(tmp_path, password=PLAIN)))


def test_a_key_passphrase_from_an_env_variable_of_any_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_KEY_PHRASE_VAR", PLAIN)  # no SECRET/PASSWORD/TOKEN in its name
    rd = _run_with(tmp_path, PLAIN)
    _refused(tmp_path, rd, PLAIN,
             inventory=str(_inventory(tmp_path, private_key_passphrase_env="NODE_KEY_PHRASE_VAR")))


def test_a_registry_password_named_by_password_env_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("NGC_API_KEY", PLAIN)  # the inventory template's own example name
    rd = _run_with(tmp_path, PLAIN)
    reg = {"server": "nvcr.io", "username": "$oauthtoken", "password_env": "NGC_API_KEY"}
    _refused(tmp_path, rd, PLAIN, inventory=str(_inventory(tmp_path, registry=reg)))


def test_ssh_connection_password_and_extras_are_registered(tmp_path):
    from dlperf_tasks.remote.connections import with_ssh_connections
    from dlperf_tasks.remote.inventory import Cluster

    cluster = Cluster.from_yaml(_inventory(tmp_path, ssh_conn_id="dlperf_node_a"))
    conn = {"login": "root", "password": "Pw-" + PLAIN,
            "extra": {"private_key_passphrase": "Ph-" + PLAIN, "api_token": "Tk-" + PLAIN, "key_file": "/k/id"}}
    with_ssh_connections(cluster, {"dlperf_node_a": conn}.get)
    got = resolved_secrets.values()
    assert {"Pw-" + PLAIN, "Ph-" + PLAIN, "Tk-" + PLAIN} <= set(got) and "/k/id" not in got
    rd = _run_with(tmp_path, "Tk-" + PLAIN)
    _refused(tmp_path, rd, "Tk-" + PLAIN)


def test_a_store_connection_secret_key_is_refused(tmp_path):
    Store.from_connection({"login": "AKIAEXAMPLEKEY", "password": PLAIN,
                           "extra": {"endpoint_url": "http://127.0.0.1:9", "aws_session_token": "St-" + PLAIN}},
                          bucket="b")
    rd = _run_with(tmp_path, PLAIN)
    _refused(tmp_path, rd, PLAIN)
    assert "St-" + PLAIN in resolved_secrets.values()


def test_the_engine_publish_resolves_the_connections_the_trials_used(tmp_path):
    """The publish step runs in its own process (a scheduler task): it resolves the inventory's
    connections itself, so a password only a connection knew is refused there too."""
    from dlperf_tasks.engine.errors import Retriable
    from dlperf_tasks.engine.finish import publish_run
    from dlperf_tasks.engine.rundir import RunDir
    from dlperf_tasks.remote.connections import with_ssh_connections
    from dlperf_tasks.core.settings import Settings

    @dataclasses.dataclass(frozen=True)
    class WithConnections(Settings):
        def resolve_cluster(self, cluster):
            return with_ssh_connections(cluster, {"dlperf_node_a": {"login": "root", "password": PLAIN}}.get)

    inv = _inventory(tmp_path, ssh_conn_id="dlperf_node_a")
    settings = WithConnections(cluster=str(inv), store_url=f"file://{tmp_path / 'store'}")
    rd = _run_with(tmp_path, PLAIN)
    assert resolved_secrets.values() == []
    with pytest.raises(Retriable, match="planted secret") as exc:
        publish_run(_store(tmp_path), RunDir(rd, rd.name), settings)
    assert PLAIN not in str(exc.value)


def test_short_and_placeholder_values_are_not_registered():
    resolved_secrets.remember("root", "password", None, "", 12345, "-----BEGIN OPENSSH PRIVATE KEY-----\n"
                              "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n")
    assert resolved_secrets.values() == ["b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"]


@pytest.mark.parametrize("form", ["uri", "json", "uri-extra"])
def test_a_secret_only_an_airflow_connection_in_the_environment_knows_is_refused_on_the_cli(tmp_path, monkeypatch,
                                                                                           capsys, form):
    """``dlperf publish`` on the CLI reads no connection, yet the registry/store connections the
    service uses may sit in ``AIRFLOW_CONN_*``: their secrets are in the CLI's leak scan too."""
    from urllib.parse import quote

    from dlperf_tasks.cli import main as cli_main

    secret = "Cn/" + PLAIN + "@x"  # reserved characters: percent-encoded in the URI form
    value = {"uri": f"docker://robot:{quote(secret, safe='')}@registry.example:5000",
             "json": '{"conn_type": "aws", "login": "AKIAEXAMPLE", "password": "' + secret + '"}',
             "uri-extra": "aws://?__extra__=" + quote('{"aws_session_token": "' + secret + '"}', safe="")}[form]
    monkeypatch.setenv("AIRFLOW_CONN_DLPERF_REGISTRY", value)
    rd = _run_with(tmp_path, secret)
    code = cli_main(["publish", str(rd), "--store", f"file://{tmp_path / 'store'}"])
    err = capsys.readouterr().err
    assert code != 0 and "planted secret" in err and secret not in err and PLAIN not in err
    assert not (tmp_path / "store" / "runs").exists()
