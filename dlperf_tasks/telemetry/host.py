"""Parsers for the host side: the host loop (``/proc/stat``, ``/proc/meminfo``, the trial's process
tree), ``ofed_info -s`` and ``ibstat``.

``/proc/stat`` ``cpuN`` lines are cumulative jiffies ``user nice system idle iowait irq softirq
steal ...``; busy share of an interval = 1 - (idle+iowait delta) / total delta. The ``tree`` line is
the trial's processes' summed utime+stime in clock ticks (USER_HZ, 100 on Linux), so its delta /
(100 x seconds) is the number of cores the trial kept busy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

USER_HZ = 100


@dataclass
class HostSample:
    t: float
    core_busy: list[float]  # per core, 0..1, over the interval ending at t
    mem_used_kib: int | None = None
    mem_total_kib: int | None = None
    swap_used_kib: int | None = None
    tree_cores: float | None = None  # cores the trial's processes used over the interval
    tree_procs: int = 0

    @property
    def busy(self) -> float:
        return sum(self.core_busy) / len(self.core_busy) if self.core_busy else 0.0


@dataclass
class HostLoop:
    samples: list[HostSample] = field(default_factory=list)
    cores: int = 0


def _jiffies(fields: list[str]) -> tuple[int, int] | None:
    try:
        vals = [int(x) for x in fields[:8]]
    except ValueError:
        return None
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals), idle


def parse_host_loop(text: str) -> HostLoop:
    out = HostLoop()
    blocks: list[dict] = []
    cur: dict | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "@" and len(parts) == 2:
            try:
                cur = {"t": float(parts[1]), "cpu": {}, "mem": {}, "tree": None}
            except ValueError:
                cur = None
                continue
            blocks.append(cur)
        elif cur is None:
            continue
        elif parts[0].startswith("cpu") and parts[0] != "cpu":
            j = _jiffies(parts[1:])
            if j:
                cur["cpu"][parts[0]] = j
        elif parts[0].endswith(":") and len(parts) >= 2 and parts[1].isdigit():
            cur["mem"][parts[0][:-1]] = int(parts[1])
        elif parts[0] == "tree" and len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            cur["tree"] = (int(parts[1]), int(parts[2]))
    for prev, b in zip(blocks, blocks[1:]):
        dt = b["t"] - prev["t"]
        if dt <= 0:
            continue
        busy = []
        for core, (tot, idle) in sorted(b["cpu"].items(), key=lambda kv: int(kv[0][3:] or 0)):
            if core not in prev["cpu"]:
                continue
            dtot, didle = tot - prev["cpu"][core][0], idle - prev["cpu"][core][1]
            busy.append(max(0.0, min(1.0, 1 - didle / dtot)) if dtot > 0 else 0.0)
        mem = b["mem"]
        tree_cores = None
        if b["tree"] is not None and prev["tree"] is not None and b["tree"][1]:
            tree_cores = max(0.0, (b["tree"][0] - prev["tree"][0]) / (USER_HZ * dt))
        s = HostSample(t=b["t"], core_busy=busy, tree_procs=b["tree"][1] if b["tree"] else 0, tree_cores=tree_cores)
        if "MemTotal" in mem and "MemAvailable" in mem:
            s.mem_total_kib, s.mem_used_kib = mem["MemTotal"], mem["MemTotal"] - mem["MemAvailable"]
        if "SwapTotal" in mem and "SwapFree" in mem:
            s.swap_used_kib = mem["SwapTotal"] - mem["SwapFree"]
        out.samples.append(s)
        out.cores = max(out.cores, len(busy))
    return out


# ---- InfiniBand stack ----------------------------------------------------------------
_VERSION = re.compile(r"(\d+(?:\.\d+)+(?:-\d+(?:\.\d+)*)*)")


def parse_ofed(text: str) -> str | None:
    """``ofed_info -s`` (``MLNX_OFED_LINUX-5.8-1.0.1.1:``) -> ``"5.8-1.0.1.1"``; None when absent."""
    t = text.strip()
    if not t or t == "absent" or "not found" in t:
        return None
    m = _VERSION.search(t.splitlines()[0])
    return m.group(1) if m else None


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


@dataclass
class IbPort:
    ca: str
    port: int
    state: str = ""
    physical_state: str = ""
    rate: float | None = None
    link_layer: str = ""


def parse_ibstat(text: str) -> list[IbPort]:
    """``ibstat``: ``CA 'mlx5_0'`` blocks with ``Port N:`` sub-blocks of ``State: Active``,
    ``Physical state: LinkUp``, ``Rate: 200``, ``Link layer: InfiniBand``. GUIDs are not kept."""
    ports: list[IbPort] = []
    ca = ""
    cur: IbPort | None = None
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^CA '([^']+)'", s)
        if m:
            ca, cur = m.group(1), None
            continue
        m = re.match(r"^Port (\d+):$", s)
        if m and ca:
            cur = IbPort(ca, int(m.group(1)))
            ports.append(cur)
            continue
        if cur is None or ":" not in s:
            continue
        key, _, val = s.partition(":")
        key, val = key.strip().lower(), val.strip()
        if key == "state":
            cur.state = val
        elif key == "physical state":
            cur.physical_state = val
        elif key == "rate":
            try:
                cur.rate = float(val)
            except ValueError:
                pass
        elif key == "link layer":
            cur.link_layer = val
    return ports
