"""A node's Docker engine through the Docker SDK, over the node's pooled SSH connection.

Every HTTP request of the SDK's :class:`docker.APIClient` goes over a channel of the SSH
connection :class:`~dlperf_tasks.remote.ssh.SSHPool` already holds for the node (its key, its
host-key check), running ``docker system dial-stdio`` there: the node's own docker CLI relays
the bytes to its engine. Nothing is written on the node.

:func:`registry_pull` logs in and pulls with the registry credentials inside the API request
(``X-Registry-Auth``): the password never lands in a file on the node (no ``DOCKER_CONFIG``, no
``~/.docker/config.json``) and never appears on a command line, so a controller killed in the
middle of a pull leaves nothing behind.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import docker
import paramiko
from docker.errors import APIError, DockerException, ImageNotFound
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnectionPool

from dlperf_tasks.core.errors import RemoteError

#: the base URL the SDK builds request URLs from; never resolved (the adapter answers every ``http://``)
_BASE_URL = "http://dlperf-node-engine:2375"
#: the version the client starts with; replaced by the engine's own before any other request
_BOOT_API_VERSION = "1.41"


class _NodeAdapter(BaseHTTPAdapter):
    """requests adapter: each connection is an SSH channel to ``docker system dial-stdio`` on the node."""

    def __init__(self, pool, node: str, timeout: float):
        super().__init__()
        self._pool, self._node, self._timeout = pool, node, timeout
        self._conn_pool: SSHConnectionPool | None = None
        self._transport: paramiko.Transport | None = None

    def get_connection(self, url, proxies=None):
        client = self._pool.client(self._node)
        transport = client.get_transport()
        if self._conn_pool is None or transport is not self._transport:  # first use, or reconnected
            if self._conn_pool is not None:
                self._conn_pool.close()
            self._conn_pool = SSHConnectionPool(ssh_client=client, timeout=self._timeout, maxsize=4)
            self._transport = transport
        return self._conn_pool

    def close(self):
        super().close()
        if self._conn_pool is not None:
            self._conn_pool.close()  # closes the channels: dial-stdio exits on the node
            self._conn_pool = None


@contextmanager
def node_engine(pool, node: str, timeout: float = 300.0) -> Iterator[docker.APIClient]:
    """The node's engine API (the version the engine speaks); ``timeout`` bounds each read."""
    api = docker.APIClient(base_url=_BASE_URL, version=_BOOT_API_VERSION, timeout=timeout)
    api.mount("http://", _NodeAdapter(pool, node, timeout))
    try:
        try:
            # what ``version="auto"`` does, but over the adapter mounted above
            api._version = str(api.version(api_version=False)["ApiVersion"])
        except (DockerException, OSError, paramiko.SSHException, KeyError) as exc:
            raise RemoteError(f"node {node}: the docker engine does not answer over SSH "
                              f"(docker system dial-stdio): {_one_line(exc)}", node=node) from None
        yield api
    finally:
        api.close()


def _one_line(exc: BaseException, secret: str | None = None, limit: int = 400) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())
    if secret:
        text = text.replace(secret, "***")
    return text[-limit:]


def image_digest_line(api: docker.APIClient, image: str) -> str | None:
    """``<json RepoDigests> <Id>`` (what ``docker image inspect --format`` prints), or None if absent."""
    import json

    try:
        info = api.inspect_image(image)
    except ImageNotFound:
        return None
    return f"{json.dumps(info.get('RepoDigests') or [])} {info.get('Id', '')}"


def registry_pull(pool, node: str, image: str, *, server: str, username: str, password: str,
                  deadline_s: float = 3600.0, stall_s: float = 300.0) -> tuple[bool, str]:
    """Log in to ``server`` and pull ``image`` unless the node has it, credentials inside the API
    requests only. Returns (pulled, inspect line). Errors are one line naming the node, the
    registry or the image, never the password."""
    auth = {"username": username, "password": password, "serveraddress": server}
    with node_engine(pool, node, timeout=stall_s) as api:
        try:
            api.login(username=username, password=password, registry=server, reauth=True)
        except (APIError, DockerException) as exc:
            raise LoginFailed(f"docker login to registry {server} as {username!r} failed on node {node}: "
                              f"{_one_line(exc, password)}", node=node) from None
        try:
            line = image_digest_line(api, image)
            if line is not None:
                return False, line
            t0 = time.monotonic()
            for msg in api.pull(image, stream=True, decode=True, auth_config=auth):
                if isinstance(msg, dict) and msg.get("error"):
                    raise RemoteError(f"node {node}: docker pull {image} failed: "
                                      f"{_one_line(Exception(msg['error']), password)}", node=node)
                if time.monotonic() - t0 > deadline_s:
                    raise RemoteError(f"node {node}: docker pull {image} did not finish within {deadline_s:.0f} s",
                                      node=node)
            line = image_digest_line(api, image)
            if line is None:
                raise RemoteError(f"node {node}: docker pull {image} ended but the node has no such image", node=node)
            return True, line
        except RemoteError:
            raise
        except (DockerException, OSError, paramiko.SSHException) as exc:
            raise RemoteError(f"node {node}: docker pull {image} failed: {_one_line(exc, password)}",
                              node=node) from None


class LoginFailed(RemoteError):
    """The registry refused the credentials."""
