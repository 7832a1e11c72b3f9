"""Environment capture per node: GPU model/driver/clocks and ``nvidia-smi topo -m`` on the host
(the GPU model also goes into the node's facts, so each trial records the model it ran on),
CUDA/cuDNN/NCCL versions inside the image, the image digest, and (from multi-node logs) the
NCCL transport (``NET/IB``, ``NET/Socket``, ``P2P``, ``SHM``) from ``NCCL_DEBUG=INFO`` lines.

A tool that is missing is recorded as ``"absent"`` (never an error): the simulated cluster
has no GPU, a real one may lack ``nvidia-smi`` in the image. Nothing here records IPs.
"""

from __future__ import annotations

import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.runtime import DockerRuntime, HostRuntime, NodeFacts
from dlperf_tasks.remote.ssh import SSHPool

ABSENT = "absent"

HOST_SCRIPT = r"""
if command -v "$SMI" >/dev/null 2>&1; then
  echo "@@gpus"; "$SMI" --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader 2>&1
  echo "@@topo"; "$SMI" topo -m 2>&1
else
  echo "@@gpus"; echo absent; echo "@@topo"; echo absent
fi
echo "@@kernel"; uname -r
echo "@@cpu"; (grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') 2>/dev/null || echo absent
echo "@@ib"; if [ -e /dev/infiniband ]; then ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '; echo; else echo absent; fi
"""

# runs inside the image (or on the host for the host runtime): NGC images export these variables
IMAGE_SCRIPT = r"""
echo "@@cuda"; if [ -n "${CUDA_VERSION:-}" ]; then echo "$CUDA_VERSION"; elif command -v nvcc >/dev/null 2>&1; then nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'; else echo absent; fi
echo "@@cudnn"; echo "${CUDNN_VERSION:-absent}"
echo "@@nccl"; echo "${NCCL_VERSION:-absent}"
echo "@@python"; (python3 -c 'import platform; print(platform.python_version())' 2>/dev/null) || echo absent
echo "@@mpirun"; (mpirun --version 2>/dev/null | head -n1) || echo absent
echo "@@framework"; echo "${PYTORCH_VERSION:-${TENSORFLOW_VERSION:-${MXNET_VERSION:-absent}}}"
"""


def _sections(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith("@@"):
            key = line[2:].strip()
            out[key] = ""
        elif key is not None:
            out[key] += line + "\n"
    return {k: (v.strip() or ABSENT) for k, v in out.items()}


def host_command(nvidia_smi: str = "nvidia-smi") -> str:
    """The host probe (:data:`HOST_SCRIPT`) with ``nvidia_smi`` as the tool to run."""
    return "SMI=" + shlex.quote(nvidia_smi) + " sh -c " + shlex.quote(HOST_SCRIPT)


def gpu_model(gpus: list[dict[str, str]] | str) -> str:
    """The node's GPU model: the one name nvidia-smi gave every GPU; several names: ``mixed: a, b``."""
    if not isinstance(gpus, list) or not gpus:
        return ABSENT
    names = sorted({g["model"] for g in gpus if g.get("model")})
    return names[0] if len(names) == 1 else ("mixed: " + ", ".join(names) if names else ABSENT)


def _gpus(text: str) -> list[dict[str, str]] | str:
    if text == ABSENT:
        return ABSENT
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            rows.append({"model": parts[0], "driver": parts[1], "max_sm_clock": parts[2], "max_mem_clock": parts[3],
                         "memory": parts[4] if len(parts) > 4 else ""})
    return rows or text


def image_probe_command(runtime: HostRuntime) -> str:
    if isinstance(runtime, DockerRuntime):
        return shlex.join(["docker", "run", "--rm", "--entrypoint", "sh", runtime.image, "-c", IMAGE_SCRIPT])
    return "sh -c " + shlex.quote(IMAGE_SCRIPT)


def capture_node(pool: SSHPool, node: str, runtime: HostRuntime, facts: NodeFacts | None = None,
                 nvidia_smi: str = "nvidia-smi") -> dict[str, Any]:
    """One node's environment; its GPU model also goes into ``facts`` (each trial records it)."""
    host = _sections(pool.run(node, host_command(nvidia_smi), timeout=60).stdout)
    res = pool.run(node, image_probe_command(runtime), timeout=300)
    image = _sections(res.stdout) if res.rc == 0 else {"error": f"image probe failed (exit {res.rc})"}
    gpus = _gpus(host.get("gpus", ABSENT))
    model = gpu_model(gpus)
    if facts is not None:
        facts.gpu_model = model if model != ABSENT else None
    return {
        "gpus": gpus,
        "gpu_model": model,
        "driver": gpus[0]["driver"] if isinstance(gpus, list) and gpus else ABSENT,
        "topo": host.get("topo", ABSENT),
        "kernel": host.get("kernel", ABSENT),
        "cpu": host.get("cpu", ABSENT),
        "infiniband": host.get("ib", ABSENT),
        "cuda": image.get("cuda", ABSENT),
        "cudnn": image.get("cudnn", ABSENT),
        "nccl": image.get("nccl", ABSENT),
        "python": image.get("python", ABSENT),
        "mpirun": image.get("mpirun", ABSENT),
        "framework_version": image.get("framework", ABSENT),
        "image_digest": (facts.image_digest if facts else None) or ABSENT,
        "nvidia_runtime": bool(facts.nvidia_runtime) if facts else False,
        "dropped_container_flags": list(facts.dropped_flags) if facts else [],
        **({"image_probe_error": image["error"]} if "error" in image else {}),
    }


def capture(pool: SSHPool, nodes: list[str], runtime: HostRuntime, facts: dict[str, NodeFacts] | None = None,
            upstream_commit: str | None = None, nvidia_smi: str = "nvidia-smi") -> dict[str, Any]:
    """``{"nodes": {name: {...}}, "upstream_commit": ..., "image": ...}`` captured in parallel.
    A node that fails is recorded with its error (the sweep decides whether that matters)."""

    def one(n: str) -> tuple[str, dict[str, Any]]:
        try:
            return n, capture_node(pool, n, runtime, (facts or {}).get(n), nvidia_smi)
        except RemoteError as exc:
            return n, {"error": str(exc)}

    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
        per_node = dict(ex.map(one, nodes))
    return {"nodes": per_node, "upstream_commit": upstream_commit or ABSENT,
            "image": getattr(runtime, "image", None) or "host", "runtime": runtime.kind}


_NCCL_VIA = re.compile(r"NCCL INFO .*?\bvia (NET/[A-Za-z]+|P2P(?:/[A-Za-z]+)?|SHM|direct shared memory)")
_NCCL_NET = re.compile(r"NCCL INFO (?:NET/|Using network )([A-Za-z]+)")


def nccl_transport(lines: Iterable[str]) -> dict[str, Any]:
    """Transports NCCL reported in a log (``NCCL_DEBUG=INFO``): ``{"network": "IB"|"Socket"|absent,
    "paths": ["NET/IB", "P2P/IPC", ...]}``."""
    paths: set[str] = set()
    network: str | None = None
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        m = _NCCL_VIA.search(line)
        if m:
            paths.add(m.group(1))
        m = _NCCL_NET.search(line)
        if m and m.group(1) in ("IB", "Socket"):
            network = network or m.group(1)
    if network is None:
        nets = sorted(p.split("/", 1)[1] for p in paths if p.startswith("NET/"))
        network = nets[0] if nets else None
    return {"network": network or ABSENT, "paths": sorted(paths)}


# --------------------------------------------------------------------------- node identity
# What redaction must know about a node (store/redact.py): every name and address it prints.
IDENTITY_SCRIPT = r"""
echo "@@hostname"; hostname 2>/dev/null || cat /proc/sys/kernel/hostname
echo "@@fqdn"; hostname -f 2>/dev/null || true
echo "@@aliases"; hostname -A 2>/dev/null || true; hostname -a 2>/dev/null || true
echo "@@addrs"; if command -v ip >/dev/null 2>&1; then ip -o addr show 2>/dev/null | awk '{print $4}'; else hostname -I 2>/dev/null | tr ' ' '\n'; fi
echo "@@if_inet6"; cat /proc/net/if_inet6 2>/dev/null | awk '{print $1}'
echo "@@macs"; cat /sys/class/net/*/address 2>/dev/null
echo "@@guids"; cat /sys/class/infiniband/*/node_guid /sys/class/infiniband/*/sys_image_guid /sys/class/infiniband/*/ports/*/gids/0 2>/dev/null
echo "@@users"; id -un 2>/dev/null; echo "${SUDO_USER:-}"; awk -F: '$3 >= 1000 && $3 < 60000 {print $1}' /etc/passwd 2>/dev/null | head -n 200; ls /home 2>/dev/null | head -n 200
"""

_SKIP_ADDRS = {"127.0.0.1", "::1", "::", "0.0.0.0"}
_SKIP_MACS = {"00:00:00:00:00:00"}


def _lines(text: str) -> list[str]:
    return [x.strip() for x in text.replace(" ", "\n").splitlines() if x.strip() and x.strip() != ABSENT]


def parse_identity(text: str) -> dict[str, Any]:
    """Output of :data:`IDENTITY_SCRIPT` -> ``{os_hostname, fqdn, short_names, addresses, macs,
    ib_guids, users}`` (loopback addresses and the all-zero MAC left out)."""
    import ipaddress

    s = _sections(text)
    host = (_lines(s.get("hostname", "")) or [""])[0]
    fqdn = (_lines(s.get("fqdn", "")) or [host])[0]
    names = {host, fqdn, *_lines(s.get("aliases", ""))}
    short = {n.split(".", 1)[0] for n in names if n} | {n for n in names if n}
    addrs: list[str] = []
    for a in _lines(s.get("addrs", "")):
        a = a.split("/", 1)[0]
        try:
            addrs.append(str(ipaddress.ip_address(a.split("%", 1)[0])))
        except ValueError:
            continue
    for h in _lines(s.get("if_inet6", "")):
        if len(h) == 32:
            addrs.append(str(ipaddress.IPv6Address(bytes.fromhex(h))))
    guids = set()
    for g in _lines(s.get("guids", "")):
        guids.add(g)
        if ":" in g and g.count(":") == 3:  # node_guid form 0c42:a103:00a1:b2c3 -> also 0x0c42a10300a1b2c3
            guids.add("0x" + g.replace(":", ""))
    users = [u for u in dict.fromkeys(_lines(s.get("users", ""))) if u and u != "root"]
    return {
        "os_hostname": host, "fqdn": fqdn,
        "short_names": sorted(n for n in short if n and n not in ("localhost", "localhost.localdomain")),
        "addresses": sorted(a for a in dict.fromkeys(addrs) if a not in _SKIP_ADDRS),
        "macs": sorted({m.lower() for m in _lines(s.get("macs", "")) if m.lower() not in _SKIP_MACS}),
        "ib_guids": sorted(guids), "users": users,
    }


def node_identity(pool: SSHPool, node: str) -> dict[str, Any]:
    """Every name and address ``node`` may print (for redaction), gathered over SSH at prepare:
    ``{os_hostname, fqdn, short_names, addresses (v4+v6), macs, ib_guids, users}``. The engine
    saves it per node as ``node-facts.json: {node: {..., "identity": <this>}}`` in the run dir;
    the store's redactor and leak scanner read it from there (``store.redact.read_node_identities``)."""
    res = pool.run(node, "sh -c " + shlex.quote(IDENTITY_SCRIPT), timeout=60)
    if res.rc not in (0, 1) or "@@hostname" not in res.stdout:
        raise RemoteError(f"node {node}: identity probe failed (exit {res.rc})")
    return parse_identity(res.stdout)


def local_identity() -> dict[str, Any]:
    """The same facts for this machine (the local cluster and the controller)."""
    import subprocess

    out = subprocess.run(["sh", "-c", IDENTITY_SCRIPT], capture_output=True, text=True, timeout=60).stdout
    return parse_identity(out)


def identities(pool: SSHPool, nodes: list[str]) -> dict[str, dict[str, Any]]:
    """:func:`node_identity` of every node, in parallel. A node that fails is recorded with
    ``{"error": ...}`` only (its inventory names are still redacted; the leak scanner still runs).
    The engine writes the result to the run dir as ``node-identity.json``."""

    def one(n: str) -> tuple[str, dict[str, Any]]:
        try:
            return n, node_identity(pool, n)
        except RemoteError as exc:
            return n, {"error": str(exc)}

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(nodes)))) as ex:
        return dict(ex.map(one, nodes))
