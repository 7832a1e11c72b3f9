"""What a real GPU cluster prints around a training log: NCCL INFO lines and OpenMPI notices.

Real logs carry the node's OS host name, its interface addresses (IPv4 and NCCL's IPv6 form
``[1]ib0:fe80::...%ib0<0>``) and, under mpirun, OpenMPI's ``Local host:`` / ``[host:pid]``
notices. Redaction (store/redact.py) and the pre-publish leak scan must see exactly that, and
the engine's NCCL transport reader (remote/envcapture.nccl_transport) parses these lines, so
the formats follow NCCL 2.7 and OpenMPI 3/4 as printed in public logs:

    dgx-01:1234:1234 [0] NCCL INFO Bootstrap : Using [0]ib0:10.1.2.3<0> [1]ib0:fe80::1e34:da03:b4:7c0e%ib0<0>
    dgx-01:1234:1234 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
    dgx-01:1234:1234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.2.3<0>
    dgx-01:1234:1234 [0] NCCL INFO Using network IB
    NCCL version 2.7.3+cuda11.0
    dgx-01:1234:1290 [0] NCCL INFO Channel 00/02 :    0   1 ...
    dgx-01:1234:1290 [0] NCCL INFO Ring 00 : 15[b2000] -> 0[1a000] [receive] via NET/IB/0
    dgx-01:1234:1290 [0] NCCL INFO Ring 00 : 0[1a000] -> 1[1b000] via P2P/IPC
    dgx-01:1234:1290 [0] NCCL INFO comm 0x7f3c4c002000 rank 0 nranks 16 cudaDev 0 busId 1a000 - Init COMPLETE

Printed only where the real programs print them: NCCL lines when ``NCCL_DEBUG=INFO`` and more
than one GPU; OpenMPI's OpenFabrics warning from local rank 0 of an mpirun job. The host name is
the container's (``socket.gethostname()``); the addresses are those of ``NCCL_SOCKET_IFNAME``
(default ``ib0``) when the machine has that interface, else made up in 10.0.0.0/8 and fe80::/64
from the host name. ``DLPERF_STANDIN_NCCL_NET=IB|Socket`` picks the network (default: IB when
``/dev/infiniband`` exists, else Socket); ``DLPERF_STANDIN_OPENMPI_NOTICE=0`` drops the notice.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import sys

_BUS_IDS = ("1a000", "1b000", "3d000", "3e000", "88000", "89000", "b1000", "b2000")


def _ipv4_of(iface: str) -> str | None:
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("256s", iface[:15].encode())
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
    except (OSError, ImportError):
        return None


def _ipv6_of(iface: str) -> str | None:
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5] == iface and parts[0].startswith("fe80"):
                    return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(parts[0]))
    except OSError:
        pass
    return None


def identity() -> dict:
    """Host name, interface, IPv4 and IPv6 (link-local) this rank would report."""
    host = socket.gethostname()
    iface = (os.environ.get("NCCL_SOCKET_IFNAME") or "ib0").split(",")[0].lstrip("^=") or "ib0"
    h = hashlib.sha1(host.encode()).digest()
    v4 = _ipv4_of(iface) or f"10.{h[0]}.{h[1]}.{max(h[2], 1)}"
    v6 = _ipv6_of(iface) or "fe80::%x:%x:%x:%x" % (
        (h[3] << 8 | h[4]) | 0x0200, h[5] << 8 | 0xff, 0xfe00 | h[6], h[7] << 8 | h[8])
    return {"host": host, "iface": iface, "ipv4": v4, "ipv6": v6}


def network() -> str:
    net = os.environ.get("DLPERF_STANDIN_NCCL_NET")
    if net in ("IB", "Socket"):
        return net
    return "IB" if os.path.exists("/dev/infiniband") else "Socket"


def nccl_lines(rank: int, local_rank: int, world: int, nodes: int, who: dict | None = None,
               pid: int | None = None) -> list[str]:
    """The NCCL INFO lines one rank prints while its communicator is set up."""
    who = who or identity()
    pid = pid or os.getpid()
    tid = pid + 56
    net = network()
    host, iface, v4, v6 = who["host"], who["iface"], who["ipv4"], who["ipv6"]
    pre = f"{host}:{pid}:{pid} [{local_rank}] NCCL INFO"
    pre_t = f"{host}:{pid}:{tid} [{local_rank}] NCCL INFO"
    bus = _BUS_IDS[local_rank % len(_BUS_IDS)]
    out = [f"{pre} Bootstrap : Using [0]{iface}:{v4}<0> [1]{iface}:{v6}%{iface}<0>",
           f"{pre} NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"]
    if net == "IB":
        out.append(f"{pre} NET/IB : Using [0]mlx5_{local_rank % 4}:1/IB ; OOB {iface}:{v4}<0>")
    else:
        out.append(f"{pre} NET/Socket : Using [0]{iface}:{v4}<0> [1]{iface}:{v6}%{iface}<0>")
    out.append(f"{pre} Using network {net}")
    if rank == 0:
        out.append("NCCL version 2.7.3+cuda11.0")
    out.append(f"{pre_t} Channel 00/02 :    " + "   ".join(str(r) for r in range(min(world, 16))))
    per_node = max(world // max(nodes, 1), 1)
    prev, nxt = (rank - 1) % world, (rank + 1) % world
    if nodes > 1 and rank % per_node == 0:
        out.append(f"{pre_t} Ring 00 : {prev}[{_BUS_IDS[prev % per_node % 8]}] -> {rank}[{bus}] [receive] "
                   f"via NET/{net}/0")
    if nodes > 1 and nxt % per_node == 0:
        out.append(f"{pre_t} Ring 00 : {rank}[{bus}] -> {nxt}[{_BUS_IDS[0]}] [send] via NET/{net}/0")
    if per_node > 1 and nxt % per_node != 0:
        out.append(f"{pre_t} Ring 00 : {rank}[{bus}] -> {nxt}[{_BUS_IDS[nxt % per_node % 8]}] via P2P/IPC")
    out.append(f"{pre_t} comm 0x7f3c4c00{2000 + rank:04x} rank {rank} nranks {world} cudaDev {local_rank} "
               f"busId {bus} - Init COMPLETE")
    if rank == 0:
        out.append(f"{pre_t} Launch mode Parallel")
    return out


def openmpi_lines(who: dict | None = None, pid: int | None = None, world: int = 1) -> list[str]:
    """OpenMPI's OpenFabrics notice (printed by local rank 0 of an mpirun job on a node with HCAs)."""
    who = who or identity()
    pid = pid or os.getpid()
    lines = ["--------------------------------------------------------------------------",
             "WARNING: There was an error initializing an OpenFabrics device.",
             "",
             f"  Local host:   {who['host']}",
             "  Local device: mlx5_0",
             "--------------------------------------------------------------------------"]
    if world > 1:
        lines.append(f"[{who['host']}:{pid}] {world - 1} more processes have sent help message "
                     "help-mpi-btl-openib.txt / error in device init")
    return lines


def preamble(cfg) -> None:
    """Print what the real cluster prints before the first training line, where it prints it."""
    who = identity()
    if os.environ.get("OMPI_COMM_WORLD_RANK") is not None and cfg.local_rank == 0 \
            and os.environ.get("DLPERF_STANDIN_OPENMPI_NOTICE", "1") != "0":
        sys.stderr.write("\n".join(openmpi_lines(who, world=cfg.world)) + "\n")
        sys.stderr.flush()
    if os.environ.get("NCCL_DEBUG", "").upper() == "INFO" and cfg.world > 1:
        ranks = [(cfg.rank, cfg.local_rank)]
        if cfg.fmt == "tensorflow_bert":  # one process per node drives all its GPUs
            gpn = max(cfg.world // max(cfg.nodes, 1), 1)
            ranks = [(cfg.rank * gpn + g, g) for g in range(gpn)]
        text = []
        for rank, local in ranks:
            text += nccl_lines(rank, local, cfg.world, cfg.nodes, who)
        sys.stdout.write("\n".join(text) + "\n")
        sys.stdout.flush()
