"""``dlperf serve --no-login``: with no login every request is admin, and the
api-server's 127.0.0.1 is reachable by every local user of the machine. ``--no-login`` refuses
to start (before anything is set up) unless ``--i-am-the-only-user`` acknowledges it, and then
says on stderr who can reach the service as admin. ``--port`` is bounded."""

from __future__ import annotations

import subprocess

import pytest

from dlperf_tasks.airflow import cli_serve
from dlperf_tasks.cli import main


def test_no_login_without_the_acknowledgement_is_refused_before_any_setup(tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(cli_serve.subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(cli_serve, "start", lambda *a, **k: ran.append(a))
    home = tmp_path / "af"
    assert main(["serve", "--no-login", "--home", str(home), "--port", "18123"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--no-login refused" in err and "every local user of this machine" in err and "admin" in err
    assert "--i-am-the-only-user" in err and "http://127.0.0.1:18123" in err
    assert ran == [] and not home.exists(), "nothing may be set up or started"


def test_no_login_with_the_acknowledgement_starts_and_says_who_is_admin(tmp_path, capsys, monkeypatch):
    """Past the gate: the setup step runs (stopped here by a failing set-up) with all-admins on."""
    seen = {}

    def fake_setup(argv, env, **kw):
        seen["env"] = env
        return subprocess.CompletedProcess(argv, 1, "stopped by the test", "")

    monkeypatch.setattr(cli_serve.subprocess, "run", fake_setup)
    assert main(["serve", "--no-login", "--i-am-the-only-user", "--home", str(tmp_path / "af")]) == 2
    assert "setting up" in capsys.readouterr().err
    assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS" not in seen["env"]  # the config's all-admins mode
    args = cli_serve.argparse.Namespace(no_login=True, i_am_the_only_user=True, port=8080)
    warning = cli_serve.no_login_check(args)
    assert warning.startswith("warning: --no-login") and "every local user of this machine" in warning
    assert "\n" not in warning


def test_login_mode_needs_no_acknowledgement(monkeypatch):
    args = cli_serve.argparse.Namespace(no_login=False, i_am_the_only_user=False, port=8080)
    assert cli_serve.no_login_check(args) is None
    env = cli_serve.service_env(cli_serve.Path("/nonexistent"), 8080, None, login=True)
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"


@pytest.mark.parametrize("port", ["0", "65536", "1" + "0" * 24, "x"])
def test_port_is_bounded(port, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--port", port])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--port" in err and len(err) < 400
