"""The interconnect probe's verdict: nccl-tests ``all_reduce_perf`` on a multi-node cell's nodes.

Before a multi-node cell, ``all_reduce_perf`` runs on the same nodes through the same image over a
size sweep; ``frameworks/_nccl_tests_log`` reads its table (or ``-J`` JSON) and the transports
NCCL named (``via NET/IB``, ``via NET/Socket``). Bus bandwidth = algbw x 2(n-1)/n for all-reduce
over ``n`` ranks (nccl-tests' doc/PERFORMANCE.md), the figure comparable with the links' bound.
The cell is flagged, before anyone reads its scaling, when the largest message's bus bandwidth is
below ``min_fraction`` of the expected bound, when NCCL fell back to sockets between nodes, or
when the probe gave no rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlperf_tasks.frameworks._nccl_tests_log import NcclResult, busbw_from_algbw, parse_text

bus_bandwidth = busbw_from_algbw  # the one formula, named as the probe uses it


@dataclass
class ProbeResult:
    """What the probe carries into the cell's result."""

    nranks: int
    rows: list[tuple[int, float]]  # (message bytes, algbw GB/s), by size
    transports: list[str]
    expected_busbw_gbs: float | None = None
    min_fraction: float = 0.8
    flags: list[str] = field(default_factory=list)

    @property
    def busbw_gbs(self) -> float | None:
        """The bus bandwidth of the largest message (the plateau nccl-tests reports)."""
        return bus_bandwidth(self.rows[-1][1], self.nranks) if self.rows else None

    def to_dict(self) -> dict:
        return {"nranks": self.nranks, "transports": list(self.transports), "busbw_gbs": self.busbw_gbs,
                "expected_busbw_gbs": self.expected_busbw_gbs, "min_fraction": self.min_fraction,
                "sizes": [{"bytes": b, "algbw_gbs": a, "busbw_gbs": bus_bandwidth(a, self.nranks)} for b, a in self.rows],
                "flags": list(self.flags)}


def judge(nccl: NcclResult, nranks: int, *, expected_busbw_gbs: float | None, min_fraction: float = 0.8) -> ProbeResult:
    """The probe result with its flags (empty: the interconnect is as expected)."""
    if not 0 < min_fraction <= 1:
        raise ValueError(f"interconnect min_fraction = {min_fraction} must be in (0, 1]")
    rows = sorted((r.size_bytes, r.algbw_gbs) for r in nccl.rows)
    res = ProbeResult(nranks, rows, list(nccl.transports), expected_busbw_gbs, min_fraction)
    if not rows:
        why = f": {nccl.errors[0]}" if nccl.errors else ""
        res.flags.append(f"interconnect probe: no all_reduce_perf rows (the probe did not run to the end){why}")
        return res
    if nccl.socket_fallback:
        res.flags.append("interconnect probe: NCCL fell back to sockets between nodes (no InfiniBand/RoCE transport)")
    busbw = res.busbw_gbs
    if expected_busbw_gbs and busbw is not None and busbw < min_fraction * expected_busbw_gbs:
        res.flags.append(f"interconnect probe: bus bandwidth {busbw:.1f} GB/s is below {min_fraction:.0%} of the "
                         f"expected {expected_busbw_gbs:.1f} GB/s")
    return res


#: the probe's settings when neither the suite nor the cluster file says otherwise
DEFAULTS: dict = {"enabled": True, "expected_busbw_gbs": None, "min_fraction": 0.8, "timeout_s": 600,
                  "slow_scaling_below": 0.9}
#: keys about the links (a cluster file's word wins) and the rest (launch settings, the suite's)
_NUMBERS = {"expected_busbw_gbs": (0.0, None), "min_fraction": (0.0, 1.0), "timeout_s": (1, 86400),
            "slow_scaling_below": (0.0, 1.0)}


def probe_settings(suite_cfg, cluster_cfg, *, where: str = "interconnect_probe") -> dict | None:
    """The probe's settings: :data:`DEFAULTS`, then the suite's ``interconnect_probe``, then the cluster
    file's (its links' expected bound wins). None (no probe) when the suite does not declare one (its
    image is not known to ship nccl-tests), or either says ``false`` or ``enabled: false`` (the
    opt-out). A bad value is one ValueError naming the key and ``where``."""
    if suite_cfg is None:
        return None
    out = dict(DEFAULTS)
    for cfg in (suite_cfg, cluster_cfg):
        if cfg is False:
            return None
        if cfg is None or cfg is True:
            continue
        if not isinstance(cfg, dict):
            raise ValueError(f"{where}: must be a mapping or true/false, got {type(cfg).__name__}")
        out.update(cfg)
    if out.get("enabled") is False:
        return None
    if not isinstance(out.get("enabled"), bool):
        raise ValueError(f"{where}.enabled = {out.get('enabled')!r} must be true or false")
    for key, (lo, hi) in _NUMBERS.items():
        v = out.get(key)
        if v is None and key == "expected_busbw_gbs":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > lo or (hi is not None and v > hi):
            bound = f"in ({lo:g}, {hi:g}]" if hi is not None else f"a number above {lo:g}"
            raise ValueError(f"{where}.{key} = {v!r} must be {bound}")
    return out


def attribute(probe, straggler_nodes, scaling_efficiency, slow_below: float) -> str | None:
    """Why a slow multi-node cell is slow, from what is measured: the probe (interconnect), the
    straggler scan (a rank's node slower than the others) and, when neither moved, the compute side.
    None when the cell is not slow (scaling efficiency unknown or at least ``slow_below``)."""
    if not isinstance(scaling_efficiency, (int, float)) or scaling_efficiency >= slow_below:
        return None
    causes = []
    flags = list((probe or {}).get("flags") or [])
    failed = (probe or {}).get("error")
    if flags:
        causes.append("the interconnect moved (" + "; ".join(f.removeprefix("interconnect probe: ") for f in flags) + ")")
    if straggler_nodes:
        causes.append(f"a straggler rank: node(s) {', '.join(sorted(straggler_nodes))} stepped slower than the others")
    if not causes:
        if probe is None or failed:
            causes.append("the compute side or the interconnect (no probe result"
                          + (f": {failed}" if failed else "") + "; no straggler rank)")
        else:
            causes.append("the compute side moved (the probe's bus bandwidth is as expected and no rank straggles)")
    return f"slow cell (scaling efficiency {scaling_efficiency:.2f} < {slow_below:.2f}): " + "; ".join(causes)


def failed_probe(nodes, reason: str, cfg: dict | None = None) -> dict:
    """The record of a probe that gave no verdict (could not start, timed out, printed no table)."""
    reason = " ".join(str(reason).split())[:600]
    return {"nodes": list(nodes), "error": reason, "flags": [f"interconnect probe failed: {reason}"],
            "expected_busbw_gbs": (cfg or {}).get("expected_busbw_gbs"), "min_fraction": (cfg or {}).get("min_fraction"),
            "slow_scaling_below": (cfg or {}).get("slow_scaling_below", DEFAULTS["slow_scaling_below"])}


def probe_record(text: str, nranks: int, cfg: dict, nodes, log: str | None = None) -> dict:
    """A probe's record from its ``all_reduce_perf`` output (the table and NCCL's INFO lines)."""
    nccl = parse_text(text)
    if not nccl.rows:
        return failed_probe(nodes, "; ".join(nccl.errors) or "no all_reduce_perf table in the log", cfg)
    res = judge(nccl, nranks, expected_busbw_gbs=cfg.get("expected_busbw_gbs"), min_fraction=float(cfg["min_fraction"]))
    return {**res.to_dict(), "nodes": list(nodes), "log": log, "avg_busbw_gbs": nccl.avg_busbw_gbs,
            "slow_scaling_below": cfg.get("slow_scaling_below", DEFAULTS["slow_scaling_below"])}
