"""A throwaway real OpenSSH server on a 127.0.0.x address, for the remote layer's tests
(until/besides the simulated cluster). Each node gets its own sshd, host key, client key,
known_hosts file and workdir. Used as a pytest fixture via ``local_nodes``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on {host}:{port} did not come up")


@dataclass
class LocalNode:
    name: str
    host: str
    port: int
    workdir: Path
    proc: subprocess.Popen | None = None
    cfg: Path | None = None

    def children(self) -> list[int]:
        """pids of this sshd's per-connection children (read from /proc)."""
        out = []
        if self.proc is None:
            return out
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    stat = Path(f"/proc/{d}/stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid == self.proc.pid:
                    out.append(int(d))
        return out

    def kill(self) -> None:
        """Kill this node's sshd AND its connection processes (simulates the node going away)."""
        if self.proc is None:
            return
        kids = self.children()
        self.proc.kill()
        self.proc.wait(5)
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None

    def start(self) -> None:
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.cfg)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        _wait_port(self.host, self.port)


def make_nodes(tmp: Path, count: int, base_octet: int = 60, gpus: int = 8) -> tuple[list[LocalNode], Path]:
    """Start ``count`` sshd servers; returns the nodes and a cluster YAML path."""
    if not os.path.exists(SSHD):
        pytest.fail("sshd not installed: apt-get install openssh-server")
    os.makedirs("/run/sshd", exist_ok=True)
    keydir = tmp / "keys"
    keydir.mkdir(exist_ok=True)
    client_key = keydir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key)], check=True)
    authorized = keydir / "authorized_keys"
    shutil.copy(f"{client_key}.pub", authorized)
    os.chmod(authorized, 0o600)
    known_hosts = keydir / "known_hosts"
    lines = []
    nodes = []
    salt = os.getpid() % 150
    for i in range(count):
        host = f"127.0.{(base_octet + salt) % 250 + 1}.{i + 10}"
        port = _free_port(host)
        ndir = tmp / f"node{i + 1}"
        ndir.mkdir()
        hostkey = ndir / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
        cfg = ndir / "sshd_config"
        cfg.write_text(
            f"ListenAddress {host}:{port}\nHostKey {hostkey}\nPidFile {ndir}/sshd.pid\n"
            f"AuthorizedKeysFile {authorized}\nPermitRootLogin yes\nPasswordAuthentication no\n"
            "UsePAM no\nStrictModes no\nSubsystem sftp internal-sftp\nMaxSessions 100\nMaxStartups 100\n"
            "ClientAliveInterval 0\nLogLevel ERROR\n"
        )
        pub = Path(f"{hostkey}.pub").read_text().split()
        lines.append(f"[{host}]:{port} {pub[0]} {pub[1]}")
        node = LocalNode(f"node{i + 1}", host, port, ndir / "work", cfg=cfg)
        node.workdir.mkdir()
        node.start()
        nodes.append(node)
    known_hosts.write_text("\n".join(lines) + "\n")
    inv = {
        "name": "local",
        "defaults": {"user": "root", "key_file": str(client_key), "known_hosts": str(known_hosts), "gpus": gpus,
                     "interface": "lo", "connect_timeout": 3},
        "nodes": [{"name": n.name, "host": n.host, "port": n.port, "workdir": str(n.workdir)} for n in nodes],
    }
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(inv))
    return nodes, path


def stop_nodes(nodes: list[LocalNode]) -> None:
    for n in nodes:
        n.kill()
