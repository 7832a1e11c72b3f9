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

from dlperf_tasks.frameworks._nccl_tests_log import NcclResult, busbw_from_algbw

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
