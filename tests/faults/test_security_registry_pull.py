"""A registry password never lands in a file on a node.

The controller is SIGKILLed in the middle of a registry pull, for real: a registry written here
(plain HTTP on 127.0.0.1, basic auth) accepts the login and then never answers the manifest
request, so the node's engine is mid-pull when the controller process dies. Afterwards no file
the nodes can see (the temp directories older builds logged in under, ~/.docker, the node
workdir) holds the password, and it never showed on a command line (``ps``). Node cleanup still
removes a registry config an older build left. Real sshd nodes and dockerd (the shared
simulated cluster); only the registry is a stand-in, so the pull can be held midway."""

from __future__ import annotations

import base64
import http.server
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dlperf_tasks.remote import nodeclean
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.remote.ssh import SSHPool

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


class _HangingRegistry(http.server.ThreadingHTTPServer):
    """Registry v2 with basic auth: ``/v2/`` answers (401 without credentials, 200 with), every
    other request carrying credentials is held open until :meth:`release` (the pull hangs midway)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.midway = threading.Event()
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, code: int, extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        authed = self.headers.get("Authorization", "").startswith("Basic ")
        if not authed:
            return self._answer(401, {"WWW-Authenticate": 'Basic realm="dlperf-test"'})
        if self.path.rstrip("/") == "/v2":
            return self._answer(200)
        self.server.midway.set()  # the engine is pulling: the manifest request never gets an answer
        self.server.released.wait(120)
        self.close_connection = True

    do_HEAD = do_GET


_PULL = """
import sys
from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.remote.dockercmd import NodeFacts
from dlperf_tasks.remote.inventory import Cluster, Registry
from dlperf_tasks.remote.runtime import DockerRuntime
from dlperf_tasks.remote.ssh import SSHPool
import dataclasses
yaml_path, server, image = sys.argv[1:4]
cluster = dataclasses.replace(Cluster.from_yaml(yaml_path),
                              registry=Registry(server, "robot", password_env="DLPERF_T27_PW"))
with SSHPool(cluster) as pool:
    DockerRuntime(ContainerSpec(image=image), registry=cluster.registry).pull(pool, "node1", NodeFacts("node1"))
"""


def _files_holding(needles: list[bytes], roots: list[Path]) -> list[str]:
    found = []
    for root in roots:
        paths = [root] if root.is_file() else (p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        for p in paths:
            try:
                if p.stat().st_size > 4 << 20:
                    continue
                data = p.read_bytes()
            except OSError:
                continue
            if any(n in data for n in needles):
                found.append(str(p))
    return found


def _temp_roots() -> list[Path]:
    """Where a node (root on this machine) could have written a login: the top of the temp
    directories (and what older builds' ``dlperf-docker-config.*`` held), ~/.docker."""
    roots = []
    for d in {Path("/tmp"), Path("/var/tmp"), Path(os.environ.get("TMPDIR", "/tmp"))}:
        roots += [p for p in d.glob("*") if p.is_file() and not p.is_symlink()]
        roots += list(d.glob("dlperf-docker-config.*"))
    home_docker = Path.home() / ".docker"
    return roots + ([home_docker] if home_docker.exists() else [])


def test_sigkill_mid_pull_leaves_no_password_on_the_node(sim_cluster, tmp_path):
    sim = sim_cluster
    password = "pw-" + secrets.token_hex(12)
    needles = [password.encode(), base64.b64encode(f"robot:{password}".encode())]
    reg = _HangingRegistry()
    threading.Thread(target=reg.serve_forever, daemon=True).start()
    server = f"127.0.0.1:{reg.server_address[1]}"
    image = f"{server}/dlperf/t27-hang:{secrets.token_hex(4)}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLPERF_T27_PW": password}
    proc = subprocess.Popen([sys.executable, "-c", _PULL, str(sim.yaml_path), server, image], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert reg.midway.wait(60), "the pull never reached the registry's manifest request"
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert password not in ps, "the registry password showed on a command line"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        node = Cluster.from_yaml(sim.yaml_path).node("node1")
        left = _files_holding(needles, _temp_roots() + [Path(node.workdir)])
        assert left == [], f"the registry password is in a file on the node: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        out = proc.stdout.read().decode(errors="replace")
        reg.release()
    assert password not in out


def test_node_cleanup_removes_an_older_builds_registry_config(sim_cluster):
    """Older builds logged in under ``$TMPDIR/dlperf-docker-config.XXXXXXXX`` (config.json with
    the password); a SIGKILL could leave it. Node cleanup (run for every run) removes it."""
    leftover = Path("/tmp") / f"dlperf-docker-config.t27{secrets.token_hex(4)}"
    leftover.mkdir(mode=0o700)
    (leftover / "config.json").write_text('{"auths": {"127.0.0.1:5000": {"auth": "cm9ib3Q6cHc="}}}')
    try:
        cluster = Cluster.from_yaml(sim_cluster.yaml_path)
        with SSHPool(cluster) as pool:
            nodeclean.clean_scratch(pool, "node1", f"t27-{secrets.token_hex(4)}", release_lease=False)
        assert not leftover.exists(), "node cleanup left an older build's registry config"
    finally:
        shutil.rmtree(leftover, ignore_errors=True)
