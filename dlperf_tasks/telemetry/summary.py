"""Per-trial telemetry summary and the policy that marks a trial.

:func:`summarise_trial` takes each node's raw sampler output (:class:`NodeRaw`) and returns a
JSON-ready dict (the trial record's ``telemetry`` key):

```
{"window": {"start": t, "end": t, "source": "log timestamps|whole trial"},
 "startup_s": 12.3,                               # launch -> first iteration
 "nodes": {"node1": {"gpu": "present|absent", "gpus": {"0": {peak_memory_mib, memory_total_mib,
            mean_power_w, power_limit_w, mean_sm_clock_mhz, max_sm_clock_mhz, sm_clock_ratio,
            mean_util_pct, max_temp_c, throttled_s, throttled_share, throttle_reasons: {reason: s},
            samples}},
            "host": {cores, mean_busy, max_core_busy, tree_cores, peak_mem_used_gib, mem_total_gib,
                     peak_swap_used_mib},
            "xids": [{gpu, code, text}], "ecc_new": {gpu: {counter: delta}},
            "ib": {ofed_host, ofed_container, ports: [{ca, port, state, rate, link_layer}]}}},
 "peak_memory_mib": 14362,                        # max over the trial's GPUs (what seed 001/002 print)
 "flags": [{"kind": "throttled|xid|ecc|cpu_bound|ofed_mismatch|ib_link_down|nccl_socket_fallback",
            "node": ..., "gpu": ..., "detail": "...", "action": "flag|invalid"}],
 "labels": ["CPU-bound", ...], "invalid_reason": ""}
```

No I/O, no Airflow: the sampler (``telemetry/sampler.py``) collects the raw text.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable

from dlperf_tasks.telemetry import commands, gpu as g, host as h
from dlperf_tasks.measure.steady import looks_like_epoch


@dataclass
class Policy:
    throttle_share: float = 0.10  # throttled longer than this share of the window -> mark
    throttle_action: str = "flag"  # flag | invalid
    xid_action: str = "invalid"
    ecc_uncorrectable_action: str = "invalid"
    cpu_busy: float = 0.90  # host CPU busy share (all cores) that counts as saturated ...
    gpu_util_low: float = 50.0  # ... while the trial's GPUs are below this utilisation (%)

    def __post_init__(self) -> None:
        for name in ("throttle_action", "xid_action", "ecc_uncorrectable_action"):
            if getattr(self, name) not in ("flag", "invalid"):
                raise ValueError(f"telemetry policy {name} must be 'flag' or 'invalid', got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, d: dict | None) -> "Policy":
        known = {k: v for k, v in (d or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class NodeRaw:
    """What the sampler brought back from one node."""

    gpu: str = ""  # gpu loop output
    host: str = ""  # host loop output
    before: str = ""  # snapshot before the trial
    after: str = ""  # snapshot after the trial
    container_ofed: str | None = None  # `ofed_info -s` inside the image
    gpu_indices: list[int] | None = None  # the GPUs the trial used on this node (None = all seen)


def measured_window(samples: Iterable, warmup: int) -> tuple[float, float] | None:
    """(first, last) timestamp of the measured iterations (iteration > warmup), from the log."""
    samples = list(samples)
    ts = [s.timestamp for s in samples if s.timestamp is not None and s.iteration > warmup]
    if len(ts) < 2:  # a reloaded trial record keeps no time stamps; timestamp-rule values are epochs
        rows = sorted((s for s in samples if s.iteration > warmup), key=lambda s: s.iteration)
        ts = [s.value for s in rows] if looks_like_epoch(rows) else []
    return (min(ts), max(ts)) if len(ts) >= 2 else None


def _mean(xs: list) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(statistics.fmean(vals), 2) if vals else None


def _durations(t: list[float]) -> list[float]:
    """Seconds each sample stands for (to the next one; the last gets the median step)."""
    if len(t) < 2:
        return [1.0] * len(t)
    steps = [b - a for a, b in zip(t, t[1:])]
    med = statistics.median(steps)
    return [max(0.0, min(s, 5 * med)) for s in steps] + [med]


def _in(t: float, win: tuple[float, float] | None) -> bool:
    return win is None or win[0] <= t <= win[1]


def gpu_summary(s: g.GpuSeries, win: tuple[float, float] | None) -> dict:
    idx = [i for i, t in enumerate(s.t) if _in(t, win)] or list(range(len(s.t)))
    pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
    dur = _durations(s.t)
    span = sum(dur[i] for i in idx) or 1.0
    reasons: dict[str, float] = {}
    throttled = 0.0
    for i in idx:
        m = s.reasons[i] & g.THROTTLE_MASK
        if m:
            throttled += dur[i]
            for name in g.decode_reasons(m):
                reasons[name] = reasons.get(name, 0.0) + dur[i]
    mem = [x for x in s.memory_used if x is not None]
    sm = _mean(pick(s.sm_clock))
    temps = [x for x in pick(s.temp) if x is not None]
    return {
        "peak_memory_mib": max(mem) if mem else None, "memory_total_mib": s.memory_total,
        "mean_power_w": _mean(pick(s.power)), "power_limit_w": s.power_limit,
        "mean_sm_clock_mhz": sm, "max_sm_clock_mhz": s.max_sm_clock,
        "sm_clock_ratio": round(sm / s.max_sm_clock, 3) if sm and s.max_sm_clock else None,
        "mean_util_pct": _mean(pick(s.util)), "max_temp_c": max(temps) if temps else None,
        "throttled_s": round(throttled, 2), "throttled_share": round(throttled / span, 3),
        "throttle_reasons": {k: round(v, 2) for k, v in reasons.items()}, "samples": len(idx),
    }


def host_summary(loop: h.HostLoop, win: tuple[float, float] | None) -> dict:
    ss = [x for x in loop.samples if _in(x.t, win)] or loop.samples
    if not ss:
        return {"cores": 0, "samples": 0}
    tree = [x.tree_cores for x in ss if x.tree_cores is not None]
    mem = [x.mem_used_kib for x in ss if x.mem_used_kib is not None]
    swap = [x.swap_used_kib for x in ss if x.swap_used_kib is not None]
    total = next((x.mem_total_kib for x in ss if x.mem_total_kib), None)
    return {
        "cores": loop.cores, "samples": len(ss),
        "mean_busy": round(statistics.fmean(x.busy for x in ss), 3),
        "max_core_busy": round(max(max(x.core_busy or [0.0]) for x in ss), 3),
        "tree_cores": round(statistics.fmean(tree), 2) if tree else None,
        "peak_mem_used_gib": round(max(mem) / 2**20, 2) if mem else None,
        "mem_total_gib": round(total / 2**20, 2) if total else None,
        "peak_swap_used_mib": round(max(swap) / 1024, 1) if swap else None,
    }


def _ib(node: str, raw: NodeRaw, sec: dict[str, str], flags: list[dict]) -> dict:
    host_ofed = h.parse_ofed(sec.get("ofed", ""))
    cont = h.parse_ofed(raw.container_ofed) if raw.container_ofed is not None else None
    ports = h.parse_ibstat(sec.get("ibstat", ""))
    if host_ofed and cont and h.version_key(cont) > h.version_key(host_ofed):
        flags.append({"kind": "ofed_mismatch", "node": node, "gpu": None, "action": "flag",
                      "detail": f"container OFED {cont} is newer than the host's {host_ofed}"})
    for p in ports:
        if p.link_layer.lower() == "infiniband" and p.state.lower() != "active":
            flags.append({"kind": "ib_link_down", "node": node, "gpu": None, "action": "flag",
                          "detail": f"{p.ca} port {p.port} is {p.state or 'unknown'} ({p.physical_state})"})
    return {"ofed_host": host_ofed, "ofed_container": cont,
            "ports": [{"ca": p.ca, "port": p.port, "state": p.state, "rate": p.rate, "link_layer": p.link_layer}
                      for p in ports]}


def _errors(node: str, raw: NodeRaw, before: dict[str, str], after: dict[str, str], used: set[int] | None,
            policy: Policy, flags: list[dict]) -> tuple[list[dict], dict]:
    inv = g.parse_inventory(after.get("inventory", "") or before.get("inventory", ""))
    by_bus = {g.bus_key(x.bus_id): x.index for x in inv}
    xids = []
    for x in g.new_xids(before.get("xid", ""), after.get("xid", "")):
        gpu_idx = by_bus.get(x.bus)
        if used is not None and gpu_idx is not None and gpu_idx not in used:
            continue  # another trial's GPU on a shared node
        xids.append({"gpu": gpu_idx, "code": x.code, "text": x.text})
        flags.append({"kind": "xid", "node": node, "gpu": gpu_idx, "action": policy.xid_action,
                      "detail": f"new XID {x.code} on GPU {gpu_idx if gpu_idx is not None else x.bus}: {x.text[:80]}"})
    q0, q1 = g.parse_query(before.get("ecc", "")), g.parse_query(after.get("ecc", ""))
    ecc_new: dict[str, dict[str, int]] = {}
    for bus, flat in q1.items():
        gpu_idx = by_bus.get(g.bus_key(bus))
        if used is not None and gpu_idx is not None and gpu_idx not in used:
            continue
        c1, c0 = g.ecc_counters(flat), g.ecc_counters(q0.get(bus, {}))
        delta = {k: v - c0.get(k, 0) for k, v in c1.items() if v - c0.get(k, 0) > 0}
        if delta:
            ecc_new[str(gpu_idx if gpu_idx is not None else bus)] = delta
            unc = delta.get("volatile_uncorrectable", 0) + delta.get("remapped_uncorrectable", 0)
            if unc:
                flags.append({"kind": "ecc", "node": node, "gpu": gpu_idx, "action": policy.ecc_uncorrectable_action,
                              "detail": f"{unc} new uncorrectable ECC error(s) on GPU {gpu_idx}"})
    return xids, ecc_new


def summarise_trial(raw: dict[str, NodeRaw], *, window: tuple[float, float] | None = None,
                    launched_at: float | None = None, first_iteration_at: float | None = None,
                    multi_node: bool = False, nccl_net: str | None = None, policy: Policy | None = None) -> dict:
    policy = policy or Policy()
    flags: list[dict] = []
    nodes: dict[str, dict] = {}
    peak = None
    for node, r in raw.items():
        loop = g.parse_gpu_loop(r.gpu)
        used = set(r.gpu_indices) if r.gpu_indices is not None else None
        before, after = commands.split_sections(r.before), commands.split_sections(r.after)
        absent = loop.absent or commands.ABSENT_MARK in before.get("inventory", "") or not loop.gpus
        entry: dict = {"gpu": "absent" if absent else "present", "gpus": {}}
        for idx, series in sorted(loop.gpus.items()):
            if used is not None and idx not in used:
                continue
            s = gpu_summary(series, window)
            entry["gpus"][str(idx)] = s
            if s["peak_memory_mib"] is not None:
                peak = max(peak or 0, s["peak_memory_mib"])
            if s["throttled_share"] > policy.throttle_share:
                why = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(s["throttle_reasons"].items()))
                flags.append({"kind": "throttled", "node": node, "gpu": idx, "action": policy.throttle_action,
                              "detail": f"GPU {idx} throttled {s['throttled_share']:.0%} of the window ({why})"})
        entry["host"] = host_summary(h.parse_host_loop(r.host), window)
        entry["xids"], entry["ecc_new"] = _errors(node, r, before, after, used, policy, flags)
        entry["ib"] = _ib(node, r, after or before, flags)
        _cpu_bound(node, entry, policy, flags)
        nodes[node] = entry
    if multi_node and nccl_net and nccl_net.lower().startswith("socket"):
        flags.append({"kind": "nccl_socket_fallback", "node": None, "gpu": None, "action": "flag",
                      "detail": "multi-node trial: NCCL used the socket transport (no IB/RDMA): speedup not comparable"})
    startup = round(first_iteration_at - launched_at, 2) if first_iteration_at and launched_at else None
    labels = sorted({_LABELS[f["kind"]] for f in flags})
    invalid = "; ".join(f"{f['node']}: {f['detail']}" if f["node"] else f["detail"]
                        for f in flags if f["action"] == "invalid")
    return {"window": {"start": window[0], "end": window[1], "source": "log timestamps"} if window
            else {"start": None, "end": None, "source": "whole trial"},
            "startup_s": startup, "nodes": nodes, "peak_memory_mib": peak, "flags": flags,
            "labels": labels, "invalid_reason": invalid}


_LABELS = {"throttled": "throttled", "xid": "XID", "ecc": "ECC", "cpu_bound": "CPU-bound",
           "ofed_mismatch": "OFED mismatch", "ib_link_down": "IB link down",
           "nccl_socket_fallback": "NCCL socket fallback"}


def _cpu_bound(node: str, entry: dict, policy: Policy, flags: list[dict]) -> None:
    host, gpus = entry["host"], entry["gpus"]
    if entry["gpu"] != "present" or not gpus or not host.get("samples"):
        return
    utils = [s["mean_util_pct"] for s in gpus.values() if s["mean_util_pct"] is not None]
    if not utils:
        return
    gpu_util = statistics.fmean(utils)
    if host["mean_busy"] >= policy.cpu_busy and gpu_util < policy.gpu_util_low:
        tree = f", the trial's processes {host['tree_cores']:.1f} cores" if host.get("tree_cores") else ""
        flags.append({"kind": "cpu_bound", "node": node, "gpu": None, "action": "flag",
                      "detail": f"host CPU {host['mean_busy']:.0%} busy over {host['cores']} cores{tree} "
                                f"while GPU utilisation averaged {gpu_util:.0f}%"})
