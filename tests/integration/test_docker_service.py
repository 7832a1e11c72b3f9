"""docker/service: the Airflow service image (Dockerfile) and its compose file.

Docker Hub is unreachable here, so the image is not built and the stack is not started
(docs/deploy.md says so). What can run, runs for real: ``docker-compose config`` (Debian's
docker-compose) validates and interpolates the compose file, and the Dockerfile's own pip
steps are resolved by pip against the package index (``--dry-run``)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "docker" / "service"
SECRETS = {"POSTGRES_PASSWORD": "pw-test", "AIRFLOW_JWT_SECRET": "jwt-test", "AIRFLOW_FERNET_KEY": "fk-test",
           "AIRFLOW_API_SECRET_KEY": "api-test"}
AIRFLOW_SERVICES = {"airflow-init", "api-server", "scheduler", "dag-processor", "triggerer", "celery-worker"}


def _compose(*args, env=None):
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: apt-get install docker-compose (scripts/setup-test-env.sh)"
    return subprocess.run([exe, "-f", str(SERVICE / "compose.yaml"), *args], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **(env or {})}, timeout=60, cwd=str(SERVICE))


def test_compose_validates_and_interpolates():
    r = _compose("config", env=SECRETS)
    assert r.returncode == 0, r.stderr
    cfg = yaml.safe_load(r.stdout)
    assert set(cfg["services"]) == {"postgres", "redis"} | AIRFLOW_SERVICES
    def command(name):
        c = cfg["services"][name].get("command")
        return c.split() if isinstance(c, str) else c

    assert command("api-server") == ["api-server"] and command("scheduler") == ["scheduler"]
    assert command("dag-processor") == ["dag-processor"] and command("triggerer") == ["triggerer"]
    assert command("celery-worker") == ["celery", "worker"]
    for name in AIRFLOW_SERVICES:
        svc = cfg["services"][name]
        assert svc["build"]["dockerfile"] == "docker/service/Dockerfile"
        env = svc["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:pw-test@postgres/")
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == "jwt-test"
        if name != "airflow-init":
            assert svc["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    port = cfg["services"]["api-server"]["ports"][0]
    assert (port["host_ip"] if isinstance(port, dict) else port.split(":")[0]) == "127.0.0.1"


def test_compose_refuses_to_start_without_secrets():
    r = _compose("config", env={k: v for k, v in SECRETS.items() if k != "AIRFLOW_JWT_SECRET"})
    assert r.returncode != 0
    assert "AIRFLOW_JWT_SECRET" in r.stderr


def test_no_secret_literal_in_compose_or_dockerfile():
    raw = yaml.safe_load((SERVICE / "compose.yaml").read_text())

    def envs(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "environment" and isinstance(v, dict):
                    yield from v.items()
                else:
                    yield from envs(v)

    for key, value in envs(raw):
        if re.search(r"PASSWORD|SECRET|FERNET|_KEY", key):
            assert str(value).startswith("${"), f"{key} must come from the environment, not {value!r}"
        assert "pw-test" not in str(value)
    text = (SERVICE / "Dockerfile").read_text()
    assert not re.search(r"(?i)(password|secret|token)\s*=", text)


def test_dockerfile_matches_the_project():
    text = (SERVICE / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:3\.3\.2$", text, re.M)
    lock = {l.split("==")[0].lower(): l.split("==")[1] for l in (ROOT / "requirements.lock").read_text().split()
            if "==" in l}
    assert lock["apache-airflow"] == "3.3.2", "the lock must pin the base image's Airflow"
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name = re.split(r"[<>=!~ \[]", dep)[0].lower()
        assert name in lock, f"{name} (pyproject dependency) is not pinned in requirements.lock"
    for src in re.findall(r"^COPY (?:--\S+ )*(.+) \./?\S*$", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), f"Dockerfile copies {part}, which is not in the repo"
    assert "pip install --no-cache-dir -r requirements.lock" in text
    assert "pip install --no-cache-dir --no-deps -e ." in text


@pytest.mark.slow
def test_dockerfile_pip_steps_resolve(tmp_path):
    """The Dockerfile's two pip steps, resolved for real by pip (dry run: nothing installed)."""
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    r = subprocess.run(pip + ["-r", str(ROOT / "requirements.lock"), "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    names = {p["metadata"]["name"].lower() for p in json.loads((tmp_path / "r.json").read_text())["install"]}
    assert {"apache-airflow", "apache-airflow-providers-ssh", "paramiko"} <= names
    r = subprocess.run(pip + ["--no-deps", str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
