"""``dlperf serve``: the embedded default as a service on this machine.

Sets up the Airflow home (scripts/airflow-env.sh: config, metadata DB, trial pool), then runs
api-server, scheduler, dag-processor and triggerer as child processes (each its own process
group, logs under ``$AIRFLOW_HOME/logs/serve/``), prints the URL, the user and where the
password is, optionally pauses or unpauses the dlperf DAGs, and on Ctrl-C (or SIGTERM) stops
them all (SIGTERM, then SIGKILL after a grace period). A component that dies stops the rest.

``--no-login`` makes every request an admin; the api-server listens on 127.0.0.1, which every
local user of the machine can reach. So ``--no-login`` refuses to start unless the single-user
acknowledgement ``--i-am-the-only-user`` is given too, and with it says on stderr who can reach
the service as admin.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.core.settings import project_root

from dlperf_tasks.cli import _args

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
SINGLE_USER_FLAG = "--i-am-the-only-user"
USER = "admin"
GRACE_S = 30


def service_env(home: Path, port: int, unpause: bool | None, login: bool) -> dict[str, str]:
    """The environment of every component (the rendered airflow.cfg plus these overrides)."""
    env = dict(os.environ)
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW_CONFIG": str(home / "airflow.cfg"), "API_PORT": str(port),
                "PYTHON": sys.executable})
    if unpause is not None:  # DAGs the dag-processor adds start in the state the user chose
        env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False" if unpause else "True"
    if login:
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "False"
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{USER}:admin"
    return env


def password_file(home: Path) -> Path:
    """Where Airflow's simple auth manager writes the generated password of the user."""
    return home / "simple_auth_manager_passwords.json.generated"


def _get(url: str, token: str | None = None, body: dict | None = None, method: str = "GET"):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                 headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
        return json.loads(text) if text else None


def wait_healthy(url: str, procs: dict[str, subprocess.Popen], deadline_s: float = 240) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        dead = [n for n, p in procs.items() if p.poll() is not None]
        if dead:
            raise DlperfError(f"{', '.join(dead)} exited while starting (see its log)")
        try:
            _get(f"{url}/api/v2/monitor/health")
            return
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(1)
    raise DlperfError(f"the api-server at {url} did not answer in {deadline_s:.0f} s")


def token(url: str, home: Path, login: bool) -> str:
    if not login:
        return _get(f"{url}/auth/token")["access_token"]
    pw = json.loads(password_file(home).read_text())[USER]
    return _get(f"{url}/auth/token", body={"username": USER, "password": pw}, method="POST")["access_token"]


def expected_dags() -> set[str]:
    """The dlperf DAG ids the catalog defines (the groups whose suites load)."""
    from dlperf_tasks.airflow.dag_factory import DAG_PREFIX
    from dlperf_tasks.catalog.loader import suites_by_group

    return {f"{DAG_PREFIX}{g}" for g in suites_by_group()[0]}


def set_paused(url: str, tok: str, paused: bool, expected: set[str], deadline_s: float = 300) -> tuple[list[str], list[str]]:
    """Pause or unpause every dlperf DAG once the dag-processor has parsed all of ``expected``
    (it parses the DAG files one by one); at the deadline, those parsed so far.
    Returns (DAGs set, expected DAGs not parsed by the deadline)."""
    end = time.monotonic() + deadline_s
    while True:
        dags = (_get(f"{url}/api/v2/dags?dag_id_pattern=dlperf_&limit=100", tok) or {}).get("dags") or []
        parsed = {d["dag_id"] for d in dags}
        if expected <= parsed or time.monotonic() >= end:
            break
        time.sleep(2)
    for d in dags:
        if d.get("is_paused") != paused:
            _get(f"{url}/api/v2/dags/{d['dag_id']}", tok, {"is_paused": paused}, method="PATCH")
    return sorted(parsed), sorted(expected - parsed)


def stop_all(procs: dict[str, subprocess.Popen], grace_s: float = GRACE_S) -> None:
    for p in procs.values():
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    end = time.monotonic() + grace_s
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def start(home: Path, env: dict[str, str]) -> dict[str, subprocess.Popen]:
    airflow = str(Path(sys.executable).parent / "airflow")
    logs = home / "logs" / "serve"
    logs.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen] = {}
    port = env["API_PORT"]
    for name in COMPONENTS:
        args = ["api-server", "--host", "127.0.0.1", "--port", port] if name == "api-server" else [name]
        with open(logs / f"{name}.log", "ab") as fh:
            procs[name] = subprocess.Popen([airflow, *args], env=env, stdout=fh, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
    return procs


def no_login_check(args) -> str | None:
    """None when login is on; the one-line warning to print when ``--no-login`` was acknowledged;
    raises (before anything is set up or started) when it was not."""
    if not args.no_login:
        return None
    if not args.i_am_the_only_user:
        raise DlperfError(f"--no-login refused: with no login every local user of this machine can reach "
                          f"http://127.0.0.1:{args.port} as admin (connections, triggers); add {SINGLE_USER_FLAG} "
                          f"if nobody else can log in to this machine, or drop --no-login")
    return (f"warning: --no-login ({SINGLE_USER_FLAG} given): every local user of this machine can reach "
            f"http://127.0.0.1:{args.port} as admin (connections, triggers)")


def serve(args) -> int:
    warning = no_login_check(args)
    home = Path(args.home or os.environ.get("AIRFLOW_HOME") or project_root() / ".airflow").resolve()
    unpause = {"unpause": True, "pause": False}.get(args.dags)
    env = service_env(home, args.port, unpause, login=not args.no_login)
    r = subprocess.run(["bash", str(project_root() / "scripts" / "airflow-env.sh")], env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise DlperfError(f"setting up {home} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    stopping = {"signal": None}

    def on_signal(signum, _frame):
        stopping["signal"] = signum
        raise KeyboardInterrupt

    procs = start(home, env)
    # SIGINT too: a shell starts a background job with SIGINT ignored, and Python keeps an inherited
    # SIG_IGN, so `dlperf serve &` (or a CI runner's background step) would never stop on Ctrl-C / kill -INT
    old = signal.signal(signal.SIGTERM, on_signal)
    old_int = signal.signal(signal.SIGINT, on_signal)
    url = f"http://127.0.0.1:{args.port}"
    try:
        wait_healthy(url, procs)
        print(f"dlperf service: {url}  (components: {', '.join(COMPONENTS)}; logs {home / 'logs' / 'serve'})")
        if warning:
            print("login: none (every request is admin; the api-server listens on 127.0.0.1 only)")
            print(warning, file=sys.stderr, flush=True)
        else:
            print(f"user: {USER}   password: in {password_file(home)} (generated by Airflow)")
        if unpause is not None:
            names, late = set_paused(url, token(url, home, not args.no_login), paused=not unpause,
                                     expected=expected_dags())
            print(f"{'unpaused' if unpause else 'paused'}: {', '.join(names) or 'no dlperf DAG parsed yet'}")
            if late:  # still start as chosen: DAGS_ARE_PAUSED_AT_CREATION is set for the dag-processor
                print(f"not parsed yet (they start {'unpaused' if unpause else 'paused'} when parsed): "
                      f"{', '.join(late)}")
        print("Ctrl-C stops the service", flush=True)
        while True:
            dead = [n for n, p in procs.items() if p.poll() is not None]
            if dead:
                print(f"{', '.join(dead)} exited; stopping the service", file=sys.stderr)
                return 1
            time.sleep(1)
    except KeyboardInterrupt:
        print("stopping the service ...", flush=True)
        return 0
    finally:
        stop_all(procs)
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)
        print("stopped", flush=True)


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the embedded default as a service (UI, scheduler, triggerer)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=_args.port, default=8080, help="api-server port on 127.0.0.1 (default 8080)")
    p.add_argument("--home", help="AIRFLOW_HOME (default $AIRFLOW_HOME, else <checkout>/.airflow)")
    p.add_argument("--dags", choices=("unpause", "pause", "keep"), default="keep",
                   help="unpause or pause every dlperf DAG at start (default keep: new DAGs start paused)")
    p.add_argument("--no-login", action="store_true",
                   help=f"no login: every request is admin, and every local user of this machine can reach the "
                        f"service; refused unless {SINGLE_USER_FLAG} is given too")
    p.add_argument(SINGLE_USER_FLAG, action="store_true",
                   help="acknowledge that nobody else can log in to this machine (needed by --no-login)")
    p.set_defaults(func=serve)
