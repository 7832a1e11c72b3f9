"""What a framework's ``launch`` returns, and what it is told about the nodes: :class:`NodeSpec`
and :class:`LaunchSpec` (framework modules import them from :mod:`dlperf_tasks.frameworks.base`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field



@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What a command builder needs to know about a node (never logged with IPs)."""

    name: str  # inventory name, e.g. node1
    address: str  # host/IP reachable from the other nodes (MASTER_ADDR, worker_hosts, mpirun -H)
    gpus: int = 8
    interface: str | None = None  # NCCL_SOCKET_IFNAME / btl_tcp_if_include


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything needed to start one node's part of a trial.

    ``argv`` is executed without a shell by the runtime (each element is passed
    literally; remote layers quote it with :func:`shlex.join`). ``env`` values are
    literal strings too.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None

    def shell(self) -> str:
        """The command as one safely quoted shell string (``env K=V ... argv``)."""
        parts = ["env"] + [f"{k}={v}" for k, v in self.env.items()] + list(self.argv)
        if self.workdir:
            return f"cd {shlex.quote(self.workdir)} && " + shlex.join(parts)
        return shlex.join(parts)
