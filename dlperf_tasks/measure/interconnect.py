"""The interconnect probe's verdict: nccl-tests ``all_reduce_perf`` on a multi-node cell's nodes.

Before a multi-node cell, ``all_reduce_perf`` runs on the same nodes through the same image over a
size sweep. Its rows give the algorithm bandwidth (bytes / time); the bus bandwidth is
``algbw x 2(n-1)/n`` for all-reduce over ``n`` ranks (nccl-tests' doc/PERFORMANCE.md), the figure
comparable with the links' bound. NCCL's INFO lines say which transport it chose between nodes
(``via NET/IB``, ``NET/Socket``). A cell is flagged, before anyone reads its scaling, when the
largest message's bus bandwidth is below ``min_fraction`` of the expected bound, or when the
transport fell back to sockets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: the inter-node transport NCCL names in its INFO lines, most specific first
_TRANSPORTS = (("IB", re.compile(r"via NET/IB|NET/IB ?: ?Using")),
               ("Socket", re.compile(r"via NET/Socket|NET/Socket ?: ?Using")),
               ("P2P", re.compile(r"via P2P/")), ("SHM", re.compile(r"via SHM/")))


def bus_bandwidth(algbw_gbs: float, nranks: int) -> float:
    """All-reduce bus bandwidth (GB/s) from the algorithm bandwidth over ``nranks`` ranks."""
    if nranks < 1:
        raise ValueError(f"nranks = {nranks} must be >= 1")
    return algbw_gbs * 2 * (nranks - 1) / nranks


def nccl_transport(lines) -> str | None:
    """The inter-node transport NCCL chose (IB | Socket), else the intra-node one (P2P | SHM), else None."""
    seen = set()
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        seen |= {name for name, rx in _TRANSPORTS if rx.search(line)}
    return next((name for name, _ in _TRANSPORTS if name in seen), None)


@dataclass
class ProbeResult:
    """What the probe carries into the cell's result."""

    nranks: int
    rows: list[tuple[int, float]]  # (message bytes, algbw GB/s)
    transport: str | None
    expected_busbw_gbs: float | None = None
    min_fraction: float = 0.8
    flags: list[str] = field(default_factory=list)

    @property
    def busbw_gbs(self) -> float | None:
        """The bus bandwidth of the largest message (the plateau nccl-tests reports)."""
        if not self.rows:
            return None
        return bus_bandwidth(max(self.rows)[1], self.nranks)

    def to_dict(self) -> dict:
        return {"nranks": self.nranks, "transport": self.transport, "busbw_gbs": self.busbw_gbs,
                "expected_busbw_gbs": self.expected_busbw_gbs, "min_fraction": self.min_fraction,
                "sizes": [{"bytes": b, "algbw_gbs": a, "busbw_gbs": bus_bandwidth(a, self.nranks)} for b, a in self.rows],
                "flags": list(self.flags)}


def judge(nranks: int, rows: list[tuple[int, float]], transport: str | None, *,
          expected_busbw_gbs: float | None, min_fraction: float = 0.8) -> ProbeResult:
    """The probe result with its flags (empty: the interconnect is as expected)."""
    if not 0 < min_fraction <= 1:
        raise ValueError(f"interconnect min_fraction = {min_fraction} must be in (0, 1]")
    res = ProbeResult(nranks, sorted(rows), transport, expected_busbw_gbs, min_fraction)
    if not rows:
        res.flags.append("interconnect probe: no all_reduce_perf rows (the probe did not run to the end)")
        return res
    if transport == "Socket":
        res.flags.append("interconnect probe: NCCL fell back to sockets between nodes (no InfiniBand/RoCE transport)")
    busbw = res.busbw_gbs
    if expected_busbw_gbs and busbw is not None and busbw < min_fraction * expected_busbw_gbs:
        res.flags.append(f"interconnect probe: bus bandwidth {busbw:.1f} GB/s is below {min_fraction:.0%} of the "
                         f"expected {expected_busbw_gbs:.1f} GB/s")
    return res
