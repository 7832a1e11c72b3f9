"""The cluster inventory: which nodes exist and how to reach them.

Loaded from a YAML file (format: docs/testcluster.md) or from Airflow-style
connection dicts. Secrets (private key text, passwords, registry passwords) are
kept out of ``repr`` and of :meth:`Cluster.public_dict` so they never reach a log.

YAML shape (every node key may also be given once under ``defaults``)::

    name: sim                      # optional
    defaults:
      user: root
      port: 22
      key_file: ~/.ssh/id_ed25519
      gpus: 8
      interface: eth0              # NCCL_SOCKET_IFNAME / btl_tcp_if_include
      workdir: /var/tmp/dlperf     # per-node scratch dir (jobs, leases)
      data_dir: /data
      known_hosts: ~/.ssh/known_hosts
      strict_host_key_checking: true   # false = explicit opt-out
      # or the key's TEXT, never written to a file or a command line:
      # private_key_env: NODE_SSH_KEY          (environment variable holding the key text)
      # private_key_passphrase_env: NODE_SSH_KEY_PASSPHRASE
      # ssh_conn_id: dlperf_node1              (an Airflow SSH connection: key text, passphrase,
      #                                         password; resolved by the Airflow layer)
    registry:                      # optional; creds come from the environment
      server: nvcr.io
      username: $oauthtoken
      password_env: NGC_API_KEY
    nodes:
      - name: node1
        host: 10.0.0.1
      - {name: node2, host: 10.0.0.2, port: 2222}

``nodes`` may also be a mapping ``{node1: {host: ...}}``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlperf_tasks.core.connection import connection_extra
from dlperf_tasks.core import resolved_secrets
from dlperf_tasks.core.errors import CatalogError, RemoteError, StoreError
from dlperf_tasks.catalog.yamlsrc import parse_yaml
from dlperf_tasks.frameworks.base import NodeSpec

_NODE_KEYS = {
    "name", "host", "port", "user", "login", "key_file", "private_key", "password", "gpus", "interface",
    "workdir", "data_dir", "mounts", "known_hosts", "strict_host_key_checking", "address", "connect_timeout",
    "labels", "mpi_ssh_port", "private_key_passphrase", "private_key_env", "private_key_passphrase_env",
    "ssh_conn_id",
}
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9_\[][A-Za-z0-9_.:%\[\]-]*$")
_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}


def _as_bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _BOOL_TRUE:
        return True
    if text in _BOOL_FALSE:
        return False
    raise RemoteError(f"inventory: {what} must be true/false, got {value!r}")


def _as_int(value: Any, what: str, minimum: int = 0) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise RemoteError(f"inventory: {what} must be an integer, got {value!r}") from None
    if out < minimum:
        raise RemoteError(f"inventory: {what} must be >= {minimum}, got {out}")
    return out


@dataclass(frozen=True)
class Node:
    """One machine. ``name`` is what logs, results and errors show (never the IP)."""

    name: str
    host: str
    port: int = 22
    user: str = "root"
    key_file: str | None = field(default=None, repr=False)
    private_key: str | None = field(default=None, repr=False)  # key text (from a connection), never logged
    private_key_passphrase: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    #: an Airflow SSH connection holding this node's key/passphrase/password (resolved by the Airflow
    #: layer through :func:`dlperf_tasks.remote.connections.with_ssh_connections`)
    ssh_conn_id: str | None = None
    gpus: int = 8
    interface: str | None = None
    workdir: str = "/var/tmp/dlperf"
    data_dir: str | None = None
    mounts: tuple[str, ...] = ()
    known_hosts: str | None = field(default=None, repr=False)
    strict_host_key_checking: bool = True
    address: str | None = field(default=None, repr=False)  # address other nodes use (defaults to host)
    connect_timeout: float = 10.0
    #: port of the MPI helper containers' sshd on this cluster (overrides the suite's ``sshd_port``,
    #: e.g. when the suite's port is taken by the node's own sshd)
    mpi_ssh_port: int | None = None

    def __post_init__(self):
        if (not self.name or "/" in self.name or self.name.strip() != self.name
                or any(ord(c) < 32 or ord(c) == 127 for c in self.name)):
            raise RemoteError(f"inventory: invalid node name {self.name!r}")
        if not self.host:
            raise RemoteError(f"inventory: node {self.name} has no host")
        # host/address end up in commands (MASTER_ADDR, mpirun -H, /dev/tcp probes): plain
        # host names and IPv4/IPv6 literals only, never shell syntax
        for key, value in (("host", self.host), ("address", self.address)):
            if value is not None and not _ADDRESS_RE.match(value):
                raise RemoteError(f"inventory: node {self.name}: invalid {key} {value!r} "
                                  f"(a host name, IPv4 or IPv6 address)")
        if not self.workdir.startswith("/"):
            raise RemoteError(f"inventory: node {self.name}: workdir must be an absolute path, got {self.workdir!r}")
        # every script takes paths as positional arguments (remote/jobs.py, allocation.py); shell
        # metacharacters that expand inside double quotes stay refused as a second line of defence
        if any(c in self.workdir for c in '$`"\\') or any(ord(c) < 32 or ord(c) == 127 for c in self.workdir):
            raise RemoteError(f"inventory: node {self.name}: workdir {self.workdir!r} must not contain "
                              f"$ ` \" \\ or control characters")
        resolved_secrets.remember(self.password, self.private_key, self.private_key_passphrase)  # leak check

    @property
    def peer_address(self) -> str:
        return self.address or self.host

    def node_spec(self) -> NodeSpec:
        return NodeSpec(name=self.name, address=self.peer_address, gpus=self.gpus, interface=self.interface)

    def public_dict(self) -> dict[str, Any]:
        """What may be written into results: no host, no IP, no key."""
        return {"name": self.name, "gpus": self.gpus}

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], defaults: Mapping[str, Any] | None = None,
                     where: str = "inventory") -> "Node":
        merged: dict[str, Any] = dict(defaults or {})
        merged.update(data)
        unknown = set(merged) - _NODE_KEYS
        if unknown:
            raise RemoteError(f"{where}: node {merged.get('name')!r}: unknown key(s) {sorted(unknown)}; "
                              f"known: {sorted(_NODE_KEYS)}")
        name = str(merged.get("name") or "")
        if not name:
            raise RemoteError(f"{where}: a node has no 'name'")
        if "host" not in merged:
            raise RemoteError(f"{where}: node {name} has no 'host'")
        kw: dict[str, Any] = {"name": name, "host": str(merged["host"])}
        if "login" in merged and "user" not in merged:
            merged["user"] = merged["login"]
        for key in ("user", "interface", "data_dir", "address"):
            if merged.get(key) is not None:
                kw[key] = str(merged[key])
        if merged.get("workdir") is not None:
            kw["workdir"] = str(merged["workdir"])
        for key in ("key_file", "known_hosts"):
            if merged.get(key):
                kw[key] = os.path.expanduser(str(merged[key]))
        for key in ("private_key", "private_key_passphrase", "password"):
            if merged.get(key):
                kw[key] = str(merged[key])
        for key in ("private_key", "private_key_passphrase"):  # ``<key>_env``: the secret's variable name
            var = merged.get(f"{key}_env")
            if var:
                if str(var) not in os.environ:
                    raise RemoteError(f"{where}: node {name}: {key}_env names the environment variable {var!r}, "
                                      f"which is not set")
                kw[key] = os.environ[str(var)]
        if merged.get("ssh_conn_id"):
            kw["ssh_conn_id"] = str(merged["ssh_conn_id"])
        if "port" in merged:
            kw["port"] = _as_int(merged["port"], f"node {name}: port", 1)
        if merged.get("mpi_ssh_port") is not None:
            kw["mpi_ssh_port"] = _as_int(merged["mpi_ssh_port"], f"node {name}: mpi_ssh_port", 1)
        if "gpus" in merged:
            kw["gpus"] = _as_int(merged["gpus"], f"node {name}: gpus", 0)
        if "connect_timeout" in merged:
            kw["connect_timeout"] = float(merged["connect_timeout"])
        if "strict_host_key_checking" in merged:
            kw["strict_host_key_checking"] = _as_bool(merged["strict_host_key_checking"],
                                                      f"node {name}: strict_host_key_checking")
        if merged.get("mounts"):
            kw["mounts"] = tuple(str(m) for m in merged["mounts"])
        return cls(**kw)


@dataclass(frozen=True)
class Registry:
    """Container registry login. The password itself is read from ``password_env`` at use time."""

    server: str
    username: str
    password_env: str | None = None
    password: str | None = field(default=None, repr=False)  # from an Airflow connection only
    username_env: str | None = None
    env_file: str | None = None  # KEY=VALUE file (mode 0600) consulted when the variables are not set

    def _env(self, name: str) -> str | None:
        if name in os.environ:
            return os.environ[name]
        if self.env_file:
            try:
                for line in Path(self.env_file).read_text().splitlines():
                    line = line.strip()
                    if line.startswith("export "):
                        line = line[7:]
                    k, sep, v = line.partition("=")
                    if sep and k.strip() == name:
                        v = v.strip()
                        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                            v = v[1:-1]
                        return v
            except OSError:
                return None
        return None

    def resolve_username(self) -> str:
        if self.username_env:
            return self._env(self.username_env) or self.username
        return self.username

    def __post_init__(self):
        resolved_secrets.remember(self.password)  # the pre-publish leak check refuses it

    def resolve_password(self) -> str | None:
        if self.password:
            return self.password
        if self.password_env:
            found = self._env(self.password_env)
            resolved_secrets.remember(found)
            return found
        return None


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    name: str = "cluster"
    registry: Registry | None = None
    source: str = ""
    #: images the cluster's own registry mirrors (e.g. ``127.0.0.1:5000/nvidia/pytorch:20.06-py3``)
    images: tuple[str, ...] = ()
    #: the interconnect probe's settings for this cluster's links (docs/interconnect-probe.md)
    interconnect_probe: Mapping[str, Any] | bool | None = None

    def __post_init__(self):
        if not self.nodes:
            raise RemoteError(f"inventory {self.source or self.name}: no nodes")
        seen: set[str] = set()
        for n in self.nodes:
            if n.name in seen:
                raise RemoteError(f"inventory {self.source or self.name}: duplicate node name {n.name!r}")
            seen.add(n.name)

    # ---- lookup ---------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise RemoteError(f"unknown node {name!r}; inventory has: {', '.join(self.names)}", node=name)

    def subset(self, names: Iterable[str]) -> "Cluster":
        wanted = list(names)
        return Cluster(tuple(self.node(n) for n in wanted), name=self.name, registry=self.registry,
                       source=self.source, images=self.images, interconnect_probe=self.interconnect_probe)

    def public_dict(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": [n.public_dict() for n in self.nodes]}

    @property
    def mpi_ssh_port(self) -> int | None:
        return next((n.mpi_ssh_port for n in self.nodes if n.mpi_ssh_port), None)

    def resolve_image(self, image: str | None) -> str | None:
        """The suite's image, or the cluster's mirror of it: an entry of ``images`` with the same
        repository path and tag under another registry (``nvcr.io/nvidia/mxnet:20.03-py3`` ->
        ``127.0.0.1:5000/nvidia/mxnet:20.03-py3``)."""
        if not image or image in self.images:
            return image
        tail = image.split("/", 1)[1] if "/" in image and _has_registry(image) else image
        for m in self.images:
            if "/" in m and m.split("/", 1)[1] == tail:
                return m
        return image

    # ---- constructors --------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "inventory") -> "Cluster":
        if not isinstance(data, Mapping):
            raise RemoteError(f"{source}: expected a mapping with 'nodes', got {type(data).__name__}")
        scheduler = str(data.get("scheduler", "docker")).strip().lower()
        if scheduler != "docker":
            raise RemoteError(f"{source}: scheduler: {scheduler!r} is not a Docker-over-SSH cluster; a Slurm cluster "
                              f"file is read by remote/slurm_inventory.py (docs/slurm.md)")
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, Mapping):
            raise RemoteError(f"{source}: 'defaults' must be a mapping")
        raw_nodes = data.get("nodes")
        if isinstance(raw_nodes, Mapping):
            raw_nodes = [dict(v or {}, name=k) for k, v in raw_nodes.items()]
        if not isinstance(raw_nodes, list) or not raw_nodes:
            raise RemoteError(f"{source}: 'nodes' must be a non-empty list or mapping")
        nodes = []
        for i, raw in enumerate(raw_nodes):
            if not isinstance(raw, Mapping):
                raise RemoteError(f"{source}: nodes[{i}] must be a mapping")
            nodes.append(Node.from_mapping(raw, defaults, where=source))
        registry = None
        reg = data.get("registry")
        if reg:
            if not isinstance(reg, Mapping) or not reg.get("server"):
                raise RemoteError(f"{source}: 'registry' needs at least 'server'")
            if reg.get("password"):
                raise RemoteError(f"{source}: registry passwords may not be written in the inventory; "
                                  f"use 'password_env' (name of an environment variable)")
            env_file = data.get("env_file")
            registry = Registry(server=str(reg["server"]), username=str(reg.get("username") or reg.get("user") or ""),
                                password_env=reg.get("password_env"), username_env=reg.get("username_env"),
                                env_file=os.path.expanduser(str(env_file)) if env_file else None)
        images = data.get("images") or ()
        if not isinstance(images, (list, tuple)):
            raise RemoteError(f"{source}: 'images' must be a list of image references")
        probe = data.get("interconnect_probe")
        if probe is not None and not isinstance(probe, (Mapping, bool)):
            raise RemoteError(f"{source}: 'interconnect_probe' must be a mapping or true/false")
        return cls(tuple(nodes), name=str(data.get("name") or "cluster"), registry=registry, source=source,
                   images=tuple(str(i) for i in images), interconnect_probe=probe)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "Cluster":
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise RemoteError(f"cannot read cluster inventory {p}: {exc.strerror}") from None
        if not text.strip():
            raise RemoteError(f"cluster inventory {p}: file is empty (expected a mapping with 'nodes')")
        try:  # one line naming file:line (PyYAML's own message is several lines with a caret)
            data, _ = parse_yaml(text, str(p))
        except CatalogError as exc:
            raise RemoteError(f"cluster inventory {exc}") from None
        try:
            return cls.from_dict(data, source=str(p))
        except RemoteError as exc:  # every inventory error names the file
            msg = str(exc)
            if not msg.startswith(str(p)):
                msg = f"{p}: {msg.removeprefix('inventory: ').removeprefix('inventory ')}"
            raise RemoteError(msg, node=exc.node) from None

    @classmethod
    def from_connections(cls, conns: Iterable[Mapping[str, Any]], name: str = "cluster",
                         registry: Mapping[str, Any] | None = None) -> "Cluster":
        """Build from Airflow-style connection dicts (plain dicts, no Airflow import):
        ``{conn_id, host, port, login, password, extra: {name, key_file, private_key, gpus, interface,
        workdir, data_dir, strict_host_key_checking/no_host_key_check, known_hosts}}``.
        The node name is ``extra.name`` or the connection id."""
        nodes = []
        for c in conns:

            extra = connection_extra(c)
            resolved_secrets.remember_connection({"password": c.get("password"), "extra": extra})
            # the SSH provider's spelling: no_host_key_check=true means no checking
            if "no_host_key_check" in extra and "strict_host_key_checking" not in extra:
                extra["strict_host_key_checking"] = not _as_bool(extra.pop("no_host_key_check"),
                                                                 "no_host_key_check")
            extra.pop("no_host_key_check", None)
            extra.pop("conn_timeout", None)
            data = {k: v for k, v in extra.items() if k in _NODE_KEYS}
            data["name"] = extra.get("name") or c.get("conn_id") or c.get("host")
            data["host"] = c.get("host")
            if c.get("port"):
                data["port"] = c["port"]
            if c.get("login"):
                data["user"] = c["login"]
            if c.get("password"):
                data["password"] = c["password"]
            nodes.append(Node.from_mapping(data, where=f"connection {c.get('conn_id')}"))
        reg = None
        if registry:
            resolved_secrets.remember_connection(registry)
            reg = Registry(server=str(registry.get("host") or registry.get("server")),
                           username=str(registry.get("login") or registry.get("username") or ""),
                           password=registry.get("password") or None,
                           password_env=(registry.get("extra") or {}).get("password_env"))
        return cls(tuple(nodes), name=name, registry=reg, source=name)


def _has_registry(image: str) -> bool:
    first = image.split("/", 1)[0]
    return "." in first or ":" in first or first == "localhost"


def node_fields() -> list[str]:
    return [f.name for f in fields(Node)]


def load_for_redaction(path: str | os.PathLike) -> Cluster:
    """The inventory at ``path`` as the publish step's redaction needs it (host, node and user
    names as the trials saw them, ``login`` aliases and defaults applied; its secrets, the
    registry's included, registered with the leak check when read). One that cannot be loaded
    stops the publish: StoreError naming the file."""
    try:
        return Cluster.from_yaml(path)
    except Exception as exc:  # noqa: BLE001 - any reason: nothing is published unredacted
        raise StoreError(f"redaction: cannot load inventory {path}: {exc}") from None
