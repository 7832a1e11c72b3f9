"""Environment capture per node: GPU model/driver/clocks and ``nvidia-smi topo -m`` on the host,
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

from dlperf_tasks.errors import RemoteError
from dlperf_tasks.remote.runtime import DockerRuntime, HostRuntime, NodeFacts
from dlperf_tasks.remote.ssh import SSHPool

ABSENT = "absent"

HOST_SCRIPT = r"""
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "@@gpus"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader 2>&1
  echo "@@topo"; nvidia-smi topo -m 2>&1
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


def capture_node(pool: SSHPool, node: str, runtime: HostRuntime, facts: NodeFacts | None = None) -> dict[str, Any]:
    host = _sections(pool.run(node, "sh -c " + shlex.quote(HOST_SCRIPT), timeout=60).stdout)
    res = pool.run(node, image_probe_command(runtime), timeout=300)
    image = _sections(res.stdout) if res.rc == 0 else {"error": f"image probe failed (exit {res.rc})"}
    gpus = _gpus(host.get("gpus", ABSENT))
    return {
        "gpus": gpus,
        "gpu_model": gpus[0]["model"] if isinstance(gpus, list) and gpus else ABSENT,
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
            upstream_commit: str | None = None) -> dict[str, Any]:
    """``{"nodes": {name: {...}}, "upstream_commit": ..., "image": ...}`` captured in parallel.
    A node that fails is recorded with its error (the sweep decides whether that matters)."""

    def one(n: str) -> tuple[str, dict[str, Any]]:
        try:
            return n, capture_node(pool, n, runtime, (facts or {}).get(n))
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
