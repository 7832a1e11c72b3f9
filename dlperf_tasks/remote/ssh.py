"""A pool of paramiko connections: one SSH connection per node, reused by every command
and reopened after a drop. All failures become :class:`RemoteError` naming the node
(its inventory name, never its address).

Host keys are checked against ``known_hosts`` unless the inventory opts out with
``strict_host_key_checking: false``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass

import paramiko

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.inventory import Cluster, Node

log = logging.getLogger(__name__)

_NET_ERRORS = (paramiko.SSHException, OSError, EOFError, socket.timeout)


@dataclass
class CommandResult:
    node: str
    command: str
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class CommandTimeout(RemoteError):
    """A command ran past its timeout (the connection itself may be fine)."""


def _load_pkey(text: str, node: str, passphrase: str | None) -> paramiko.PKey:
    """The key from its text (never written to a file). A wrong or missing passphrase and an
    unreadable key are reported without any part of the key or the passphrase."""
    need_passphrase = False
    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key(io.StringIO(text), password=passphrase)
        except paramiko.PasswordRequiredException:
            need_passphrase = True
        except (paramiko.SSHException, ValueError):
            continue
    if need_passphrase:
        raise RemoteError(f"node {node}: the private key is encrypted and no passphrase was given", node=node)
    raise RemoteError(f"node {node}: the private key given in the connection cannot be read "
                      f"(or its passphrase is wrong)", node=node)


class SSHPool:
    """Thread-safe: concurrent commands to one node share its connection (one channel each)."""

    def __init__(self, cluster: Cluster, connect_timeout: float | None = None, keepalive_s: int = 5):
        self.cluster = cluster
        self.connect_timeout = connect_timeout
        self.keepalive_s = keepalive_s
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._sftp: dict[str, paramiko.SFTPClient] = {}
        self._locks: dict[str, threading.Lock] = {n: threading.Lock() for n in cluster.names}
        self._sftp_locks: dict[str, threading.Lock] = {n: threading.Lock() for n in cluster.names}

    # ---- connections ----------------------------------------------------------
    def __enter__(self) -> "SSHPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _connect(self, node: Node) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if node.strict_host_key_checking:
            try:
                if node.known_hosts:
                    client.load_host_keys(node.known_hosts)
                else:
                    client.load_system_host_keys()
            except OSError as exc:
                raise RemoteError(f"node {node.name}: cannot read known_hosts: {exc.strerror}", node=node.name) from None
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        kw = dict(hostname=node.host, port=node.port, username=node.user,
                  timeout=self.connect_timeout or node.connect_timeout,
                  banner_timeout=self.connect_timeout or node.connect_timeout,
                  auth_timeout=self.connect_timeout or node.connect_timeout,
                  allow_agent=False, look_for_keys=False)
        if node.private_key:
            kw["pkey"] = _load_pkey(node.private_key, node.name, node.private_key_passphrase or node.password)
        elif node.key_file:
            kw["key_filename"] = node.key_file
            if node.private_key_passphrase:
                kw["passphrase"] = node.private_key_passphrase
        if node.password:
            kw["password"] = node.password
        try:
            client.connect(**kw)
        except paramiko.BadHostKeyException:
            client.close()
            raise RemoteError(f"node {node.name}: host key does not match known_hosts (possible MITM)",
                              node=node.name) from None
        except paramiko.AuthenticationException:
            client.close()
            raise RemoteError(f"node {node.name}: SSH authentication failed for user {node.user}",
                              node=node.name) from None
        except paramiko.SSHException as exc:
            client.close()
            msg = str(exc)
            if "not found in known_hosts" in msg:
                msg = ("host key not in known_hosts (add it, or set strict_host_key_checking: false "
                       "in the inventory to opt out)")
            raise RemoteError(f"node {node.name}: SSH connection failed: {msg}", node=node.name) from None
        except (OSError, EOFError, socket.timeout) as exc:
            client.close()
            raise RemoteError(f"node {node.name}: unreachable over SSH ({type(exc).__name__}: "
                              f"{getattr(exc, 'strerror', None) or exc})", node=node.name) from None
        transport = client.get_transport()
        if transport is not None and self.keepalive_s:
            transport.set_keepalive(self.keepalive_s)
        return client

    def client(self, name: str) -> paramiko.SSHClient:
        """The node's live connection (opened or reopened as needed)."""
        node = self.cluster.node(name)
        with self._locks[name]:
            c = self._clients.get(name)
            t = c.get_transport() if c else None
            if c is None or t is None or not t.is_active():
                if c is not None:
                    self._drop_locked(name)
                c = self._connect(node)
                self._clients[name] = c
            return c

    def _drop_locked(self, name: str) -> None:
        s = self._sftp.pop(name, None)
        c = self._clients.pop(name, None)
        for obj in (s, c):
            try:
                if obj is not None:
                    obj.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def drop(self, name: str) -> None:
        """Forget a node's connection (the next call reconnects)."""
        with self._locks[name]:
            self._drop_locked(name)

    def close(self) -> None:
        for name in list(self._clients):
            self.drop(name)

    # ---- commands -------------------------------------------------------------
    def run(self, name: str, command: str, timeout: float | None = 60.0, check: bool = False,
            stdin: bytes | str | None = None, retries: int = 1) -> CommandResult:
        """Run ``command`` (a shell string, already quoted) on ``name``; return rc/stdout/stderr.

        ``stdin`` is written to the command's standard input then closed (used for secrets such as
        a job's env file; they never appear in the command line).
        A dropped connection is reopened and the command retried ``retries`` times when the channel
        could not be opened; a command that already started is never re-run.
        """
        attempt = 0
        while True:
            client = self.client(name)
            try:
                transport = client.get_transport()
                if transport is None:
                    raise paramiko.SSHException("no transport")
                chan = transport.open_session(timeout=self.connect_timeout or 10)
            except _NET_ERRORS as exc:
                self.drop(name)
                if attempt < retries:
                    attempt += 1
                    continue
                raise RemoteError(f"node {name}: SSH channel failed ({type(exc).__name__}: {exc})",
                                  node=name) from None
            break
        return self._run_on_channel(name, chan, command, timeout, check, stdin)

    def _run_on_channel(self, name, chan, command, timeout, check, stdin) -> CommandResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            chan.settimeout(1.0)
            chan.exec_command(command)
            if stdin is not None:
                chan.sendall(stdin.encode() if isinstance(stdin, str) else stdin)
            chan.shutdown_write()
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if chan.closed and not got:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise CommandTimeout(f"node {name}: command timed out after {timeout:.0f} s: "
                                         f"{_short(command)}", node=name)
                if not got:
                    chan.status_event.wait(0.02)
            rc = chan.recv_exit_status() if chan.exit_status_ready() else -1
        except CommandTimeout:
            chan.close()
            raise
        except _NET_ERRORS as exc:
            self.drop(name)
            raise RemoteError(f"node {name}: connection lost while running a command "
                              f"({type(exc).__name__}: {exc})", node=name) from None
        finally:
            chan.close()
        res = CommandResult(name, command, rc, out.decode(errors="replace"), err.decode(errors="replace"))
        if rc == -1:
            self.drop(name)
            raise RemoteError(f"node {name}: connection lost while running a command (no exit status)", node=name)
        if check and rc != 0:
            raise RemoteError(f"node {name}: command failed (exit {rc}): {_short(command)}: "
                              f"{res.stderr.strip()[-500:]}", node=name)
        return res

    # ---- files ----------------------------------------------------------------
    def sftp(self, name: str) -> paramiko.SFTPClient:
        client = self.client(name)
        with self._sftp_locks[name]:
            s = self._sftp.get(name)
            if s is None or s.get_channel() is None or s.get_channel().closed:
                try:
                    s = client.open_sftp()
                except _NET_ERRORS as exc:
                    self.drop(name)
                    raise RemoteError(f"node {name}: SFTP failed ({type(exc).__name__}: {exc})", node=name) from None
                self._sftp[name] = s
            return s

    def read(self, name: str, path: str, offset: int = 0, max_bytes: int | None = None) -> bytes | None:
        """Bytes of remote ``path`` from ``offset`` (at most ``max_bytes``); None if it does not exist."""
        for attempt in range(2):
            try:
                s = self.sftp(name)
                with self._sftp_locks[name]:
                    try:
                        f = s.open(path, "rb")
                    except FileNotFoundError:
                        return None
                    except IOError as exc:
                        if getattr(exc, "errno", None) == 2:
                            return None
                        raise
                    with f:
                        if offset:
                            f.seek(offset)
                        data = f.read(max_bytes) if max_bytes is not None else f.read()
                    return bytes(data)
            except _NET_ERRORS as exc:
                self.drop(name)
                if attempt == 0:
                    continue
                raise RemoteError(f"node {name}: cannot read {path} over SFTP ({type(exc).__name__}: {exc})",
                                  node=name) from None
        return None  # pragma: no cover

    def get(self, name: str, remote_path: str, local_path: str) -> bool:
        """Copy a remote file; False when it does not exist."""
        data = self.read(name, remote_path)
        if data is None:
            return False
        import os

        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        with open(local_path, "wb") as f:
            f.write(data)
        return True

    def put_bytes(self, name: str, remote_path: str, data: bytes, mode: int = 0o600) -> None:
        """Write a remote file atomically: a temporary file beside it, then a POSIX rename, so a
        reader on the node (another run's trial reading the same catalog file) never sees it
        half-written."""
        for attempt in range(2):
            tmp = f"{remote_path}.tmp-{uuid.uuid4().hex[:12]}"
            try:
                s = self.sftp(name)
                with self._sftp_locks[name]:
                    try:
                        with s.open(tmp, "wb") as f:
                            f.write(data)
                        s.chmod(tmp, mode)
                        s.posix_rename(tmp, remote_path)
                    except OSError:
                        with contextlib.suppress(OSError):
                            s.remove(tmp)
                        raise
                return
            except _NET_ERRORS as exc:
                self.drop(name)
                if attempt == 0:
                    continue
                raise RemoteError(f"node {name}: cannot write {remote_path} over SFTP ({exc})", node=name) from None


def _short(command: str, n: int = 160) -> str:
    command = " ".join(command.split())
    return command if len(command) <= n else command[: n - 3] + "..."
