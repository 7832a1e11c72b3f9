"""Parsers for what nvidia-smi and the kernel log print (formats checked against a real H100,
driver 580.159.04: ``tests/data/nvidia_smi/``).

* loop CSV (``--format=csv,noheader,nounits``, fields :data:`commands.GPU_FIELDS`): one line per
  GPU per tick, ``2026/11/23 03:57:45.461, 0, 0, 81559, 0, 108.49, 700.00, 375, 2619, 1980, 37,
  0x0000000000000001``; a value nvidia-smi cannot read is ``[N/A]`` / ``[Not Supported]`` / ``N/A``.
* ``clocks_throttle_reasons.active`` (a.k.a. ``clocks_event_reasons.active``) is NVML's bitmask
  (nvml.h ``nvmlClocksThrottleReason*`` / ``nvmlClocksEventReason*``): :data:`REASON_BITS`.
* ``nvidia-smi -q`` (any ``-d``): ``GPU <bus id>`` blocks of ``Key : value`` lines indented by
  4 spaces per level; :func:`parse_query` flattens them to ``"ECC Errors/Volatile/DRAM Correctable"``.
* kernel log: ``NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics ...``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from dlperf_tasks.telemetry.commands import ABSENT_MARK, GPU_FIELDS

#: NVML clock event (throttle) reason bits
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: reasons that mean "the GPU ran slower than it could because of power or heat" (idle, app clocks,
#: sync boost and display clocks are settings or states, not throttling)
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
_NA = {"", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[GPU is lost]"}


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if mask & bit]


def _num(text: str) -> float | None:
    t = text.strip()
    if t in _NA:
        return None
    t = t.split()[0] if " " in t else t  # tolerate units if --format lacked nounits
    try:
        return float(int(t, 16)) if t.startswith("0x") else float(t)
    except ValueError:
        return None


def _ts(text: str) -> float | None:
    try:
        return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


@dataclass
class GpuSeries:
    """One GPU's samples (parallel lists) plus its static limits."""

    index: int
    t: list[float] = field(default_factory=list)
    memory_used: list[float | None] = field(default_factory=list)
    util: list[float | None] = field(default_factory=list)
    power: list[float | None] = field(default_factory=list)
    sm_clock: list[float | None] = field(default_factory=list)
    mem_clock: list[float | None] = field(default_factory=list)
    temp: list[float | None] = field(default_factory=list)
    reasons: list[int] = field(default_factory=list)
    memory_total: float | None = None
    power_limit: float | None = None
    max_sm_clock: float | None = None

    def __len__(self) -> int:
        return len(self.t)


@dataclass
class GpuLoop:
    """Parsed loop output of one node: ``absent`` when the node has no nvidia-smi."""

    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    absent: bool = False
    errors: list[str] = field(default_factory=list)


def parse_gpu_loop(text: str) -> GpuLoop:
    out = GpuLoop()
    n = len(GPU_FIELDS)
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line == ABSENT_MARK:
            out.absent = True
            continue
        cols = [c.strip() for c in line.split(",")]
        ts = _ts(cols[0]) if cols else None
        if len(cols) != n or ts is None:
            if len(out.errors) < 20:
                out.errors.append(line[:200])
            continue
        idx = _num(cols[1])
        if idx is None:
            continue
        s = out.gpus.setdefault(int(idx), GpuSeries(int(idx)))
        s.t.append(ts)
        s.memory_used.append(_num(cols[2]))
        s.util.append(_num(cols[4]))
        s.power.append(_num(cols[5]))
        s.sm_clock.append(_num(cols[7]))
        s.mem_clock.append(_num(cols[8]))
        s.temp.append(_num(cols[10]))
        mask = _num(cols[11])
        s.reasons.append(int(mask) if mask is not None else 0)
        s.memory_total = _num(cols[3]) or s.memory_total
        s.power_limit = _num(cols[6]) or s.power_limit
        s.max_sm_clock = _num(cols[9]) or s.max_sm_clock
    return out


@dataclass
class GpuInfo:
    index: int
    bus_id: str
    name: str
    max_sm_clock: float | None = None
    max_mem_clock: float | None = None
    power_limit: float | None = None
    driver: str = ""


def parse_inventory(text: str) -> list[GpuInfo]:
    """Lines of ``index, pci.bus_id, name, uuid, clocks.max.sm, clocks.max.mem, power.limit, driver_version``."""
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 8 or not cols[0].isdigit():
            continue
        gpus.append(GpuInfo(int(cols[0]), cols[1], cols[2], _num(cols[4]), _num(cols[5]), _num(cols[6]), cols[7]))
    return gpus


_KV = re.compile(r"^( *)([^:]+?)\s*:\s*(.*)$")
_SECTION = re.compile(r"^( *)(\S.*?)\s*$")


def parse_query(text: str) -> dict[str, dict[str, str]]:
    """``nvidia-smi -q`` -> ``{bus_id: {"A/B/C": value}}`` (bus id as printed, e.g. ``00000000:00:06.0``)."""
    out: dict[str, dict[str, str]] = {}
    cur: dict[str, str] | None = None
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        if line.startswith("GPU "):
            cur = out.setdefault(line[4:].strip(), {})
            stack = []
            continue
        if cur is None or not line.startswith(" "):
            continue
        m = _KV.match(line)
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if m and m.group(3) != "":
            cur["/".join([s for _, s in stack] + [m.group(2).strip()])] = m.group(3).strip()
            stack.append((indent, m.group(2).strip()))  # a valued key may have children (HW Slowdown)
        else:
            sm = _SECTION.match(line)
            if sm:
                stack.append((indent, sm.group(2).rstrip(": ").strip()))
    return out


def ecc_counters(flat: dict[str, str]) -> dict[str, int]:
    """Volatile correctable / uncorrectable ECC counts and uncorrectable remapped rows of one GPU.
    Understands the current layout (``ECC Errors/Volatile/DRAM Uncorrectable``...) and the older one
    (``ECC Errors/Volatile/Single Bit/Total``, ``Double Bit/Total``)."""
    corr = unc = 0
    seen = False
    for key, val in flat.items():
        if not key.startswith("ECC Errors/Volatile/"):
            continue
        v = _num(val)
        if v is None:
            continue
        leaf = key.split("/")[-1]
        if "/Single Bit/" in key or "/Double Bit/" in key:
            if leaf != "Total":
                continue
            seen = True
            if "/Single Bit/" in key:
                corr += int(v)
            else:
                unc += int(v)
        elif "Uncorrectable" in leaf:
            seen, unc = True, unc + int(v)
        elif "Correctable" in leaf:
            seen, corr = True, corr + int(v)
    out = {"volatile_correctable": corr, "volatile_uncorrectable": unc} if seen else {}
    rr = _num(flat.get("Remapped Rows/Uncorrectable Error", ""))
    if rr is not None:
        out["remapped_uncorrectable"] = int(rr)
    return out


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+),?\s*(.*)")


@dataclass(frozen=True)
class Xid:
    bus: str  # "cb:00" (bus:device, lower case): matches an inventory bus id
    code: int
    text: str
    line: str


def bus_key(bus_id: str) -> str:
    """``00000000:CB:00.0`` / ``0000:cb:00`` -> ``cb:00``."""
    parts = bus_id.lower().split(".")[0].split(":")
    return ":".join(parts[-2:])


def parse_xids(text: str) -> list[Xid]:
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            out.append(Xid(bus_key(m.group(1)), int(m.group(2)), m.group(3).strip()[:200], line.strip()))
    return out


def new_xids(before: str, after: str) -> list[Xid]:
    """XID lines in ``after`` that ``before`` did not have (counted, so repeated lines count)."""
    seen = Counter(x.line for x in parse_xids(before))
    fresh = []
    for x in parse_xids(after):
        if seen[x.line]:
            seen[x.line] -= 1
        else:
            fresh.append(x)
    return fresh
