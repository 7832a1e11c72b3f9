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
    assert command("celery-worker")[:2] == ["celery", "worker"]
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


# ---- the compose stack runs what the scale-out test runs -------------------------
FIXTURE = ROOT / "tests" / "fixtures" / "celery_airflow.py"
SCALE_OUT = ROOT / "tests" / "integration" / "test_scale_out.py"
# settings of the test that a deployment sets otherwise on purpose (key -> why)
TEST_ONLY = {"AIRFLOW__DLPERF__SCHEDULE_PYTORCH": "the test triggers by hand; a deployment keeps the nightly crons"}
# worker flags of the test that a deployment leaves out on purpose
TEST_ONLY_FLAGS = {"--skip-serve-logs": "the api-server reads a worker's task logs from its log server (8793)",
                   "--celery-hostname": "a container's host name already names the worker",
                   "--concurrency": "set by [celery] worker_concurrency (AIRFLOW__CELERY__WORKER_CONCURRENCY)"}


def _tree(path: Path):
    import ast

    return ast.parse(path.read_text(), filename=str(path))


def _constant_env(path: Path) -> dict[str, str]:
    """``"AIRFLOW__...": "<constant>"`` pairs of every dict literal in a test source."""
    import ast

    out = {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if (isinstance(k, ast.Constant) and str(k.value).startswith("AIRFLOW__")
                        and isinstance(v, ast.Constant)):
                    out[k.value] = str(v.value)
    return out


def _fixture_commands() -> dict[str, list]:
    """The fixture's Airflow commands: {name: argv with None for computed parts}, workers as "celery"."""
    import ast

    found = {}
    for node in ast.walk(_tree(FIXTURE)):
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant):
            argv = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if argv[0] in ("api-server", "scheduler", "dag-processor", "triggerer", "celery"):
                found[argv[0]] = argv
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_airflow"
                and [getattr(a, "value", None) for a in node.args[1:3]] == ["pools", "set"]):
            found["pools"] = [a.value if isinstance(a, ast.Constant) else None for a in node.args[1:]]
        if isinstance(node, ast.FunctionDef) and node.name == "start":
            names = [a.arg for a in node.args.args[-len(node.args.defaults):]] if node.args.defaults else []
            found["defaults"] = {n: getattr(d, "value", None) for n, d in zip(names, node.args.defaults)}
    return found


def _raw_compose() -> dict:
    return yaml.safe_load((SERVICE / "compose.yaml").read_text())  # merge keys (<<) resolved


def test_compose_has_the_scale_out_test_settings():
    """Every constant executor/scheduler/dlperf setting of the scale-out test (fixture + test) is
    set to the same value in every Airflow container of the compose stack, except TEST_ONLY."""
    want = {**_constant_env(FIXTURE), **_constant_env(SCALE_OUT)}
    assert {"AIRFLOW__CORE__EXECUTOR", "AIRFLOW__CORE__PARALLELISM",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT"} <= set(want), want
    services = _raw_compose()["services"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        for key, value in want.items():
            if key in TEST_ONLY:
                continue
            assert str(env.get(key)) == value, f"{name}: {key} is {env.get(key)!r}, the scale-out test runs {value!r}"
        # same metadata DB and result backend drivers as tests/fixtures/services.py
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://")
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
    src = (ROOT / "tests" / "fixtures" / "services.py").read_text()
    assert 'f"postgresql+psycopg2://' in src and 'f"db+postgresql+psycopg2://' in src and 'f"redis://' in src


def test_compose_runs_the_scale_out_components_and_pool():
    """The fixture's api-server, scheduler, dag-processor, triggerer and Celery worker (same flags but
    TEST_ONLY_FLAGS) are compose services; airflow-init creates the fixture's pool with its slots."""
    cmds = _fixture_commands()
    services = _raw_compose()["services"]
    for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert name in cmds, f"the fixture no longer starts {name}?"
        assert services[name]["command"].split()[0] == name
    worker = services["celery-worker"]["command"].split()
    assert worker[:2] == ["celery", "worker"]
    for flag in (a for a in cmds["celery"] if isinstance(a, str) and a.startswith("--")):
        assert flag in worker or flag in TEST_ONLY_FLAGS, f"celery worker flag {flag} of the test is not in compose"
    assert "AIRFLOW__CELERY__WORKER_CONCURRENCY" in services["celery-worker"]["environment"]
    init = " ".join(services["airflow-init"]["command"])
    pools = cmds["pools"]  # ["pools", "set", <name>, str(pool_slots), <description>, --flags...]
    slots = cmds["defaults"]["pool_slots"]
    assert f"airflow pools set {pools[2]} {slots} " in init, (pools, slots, init)
    for flag in (a for a in pools if isinstance(a, str) and a.startswith("--")):
        assert flag in init, f"the fixture's pool flag {flag} is not in airflow-init"


def test_compose_stages_through_the_store_without_a_shared_work_dir():
    """As in the test: a store URL for the staging area, and each container's work_dir on its own disk."""
    services = _raw_compose()["services"]
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        env = svc["environment"]
        assert env["AIRFLOW__DLPERF__STORE_URL"].startswith("${DLPERF_STORE_URL")
        work = env["AIRFLOW__DLPERF__WORK_DIR"]
        mounts = [str(v).split(":")[1] for v in svc.get("volumes", [])]
        assert not any(work == m or work.startswith(m.rstrip("/") + "/") for m in mounts), (name, work, mounts)
