"""SSH credentials from connections (Airflow SSH connections, passed in as plain dicts: no
Airflow import here).

A YAML inventory node may name ``ssh_conn_id``; the Airflow layer resolves the connections and
calls :func:`with_ssh_connections` with a lookup function. The connection's secrets (the
private key's text, its passphrase, the password) are kept in memory on the :class:`Node`
(excluded from ``repr`` and ``public_dict``) and handed to paramiko directly: never written to a
file, a command line or a log.

Connection dict (the SSH provider's field names)::

    {"login": "root", "password": "...",
     "extra": {"private_key": "-----BEGIN OPENSSH PRIVATE KEY-----...", "private_key_passphrase": "...",
               "key_file": "/path/id_ed25519"}}

``extra`` may also be its JSON text.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from dlperf_tasks.core import resolved_secrets
from dlperf_tasks.core.connection import connection_extra
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.inventory import Cluster, Node


def ssh_secrets(conn: Mapping[str, Any], conn_id: str) -> dict[str, str]:
    """The node fields a connection sets: ``user``, ``password``, ``private_key`` (text),
    ``private_key_passphrase``, ``key_file``; only those it has."""
    extra = connection_extra(conn, conn_id)
    resolved_secrets.remember_connection({"password": conn.get("password"), "extra": extra})
    out: dict[str, str] = {}
    if conn.get("login"):
        out["user"] = str(conn["login"])
    if conn.get("password"):
        out["password"] = str(conn["password"])
    for key in ("private_key", "private_key_passphrase", "key_file"):
        if extra.get(key):
            out[key] = str(extra[key])
    if "private_key" in out and "-----BEGIN" not in out["private_key"]:
        raise RemoteError(f"connection {conn_id}: extra.private_key is not a PEM/OpenSSH private key text")
    return out


def with_ssh_connections(cluster: Cluster, lookup: Callable[[str], Mapping[str, Any] | None]) -> Cluster:
    """The cluster with each ``ssh_conn_id`` node's credentials taken from ``lookup(conn_id)``.
    A missing connection is an error naming the node and the connection id."""
    nodes: list[Node] = []
    for n in cluster.nodes:
        if not n.ssh_conn_id:
            nodes.append(n)
            continue
        conn = lookup(n.ssh_conn_id)
        if conn is None:
            raise RemoteError(f"node {n.name}: SSH connection {n.ssh_conn_id!r} not found", node=n.name)
        secrets = ssh_secrets(conn, n.ssh_conn_id)
        if "private_key" in secrets:  # the connection's key wins over an inventory key file
            secrets.setdefault("key_file", None)
        nodes.append(dataclasses.replace(n, **secrets))
    return dataclasses.replace(cluster, nodes=tuple(nodes))
