"""Cell ids and the short cell specs users type.

A cell id (``Cell.id``) is ``<suite>/bz<B>/<prec>[_xla][/<layout case>]/<N>n<G>g``, e.g.
``mxnet-bert/bz32/fp32/4n8g``. On the command line a cell can be named by its full id or by
its parts in any order without the suite: ``4n8g/bz32/fp32`` or ``bz32/fp16_xla/1n1g``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from dlperf_tasks.core.errors import DlperfError

_TOPO = re.compile(r"^(?P<n>[1-9]\d*)n(?P<g>[1-9]\d*)g$")
_BZ = re.compile(r"^bz(?P<b>\d+)$")


class CellSpecError(DlperfError):
    """A cell spec matches no cell, or several."""


@dataclass(frozen=True)
class CellKey:
    """The parts of a cell id."""

    cell_id: str
    suite: str
    batch_size: int | None
    precision: str  # as in the id: fp32, fp16, fp16_xla ...
    layout_case: str | None
    topology: str
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def group(self) -> str:
        """The cell id without its topology: cells sharing it are compared for speedup."""
        return self.cell_id.rsplit("/", 1)[0]

    @property
    def config(self) -> str:
        """``bz32/fp32`` (+ layout case): a short label of the speedup group without the suite."""
        parts = [f"bz{self.batch_size}" if self.batch_size is not None else None, self.precision, self.layout_case]
        return "/".join(p for p in parts if p)

    @property
    def baseline_id(self) -> str | None:
        """The 1n1g cell of the same group (None for layout cells: Megatron has no speedup)."""
        if self.layout_case is not None:
            return None
        return f"{self.group}/1n1g"

    @property
    def is_baseline(self) -> bool:
        return self.topology == "1n1g"


def parse_cell_id(cell_id: str) -> CellKey:
    """Split a cell id into its parts; raises :class:`CellSpecError` naming the bad id."""
    parts = str(cell_id).split("/")
    if len(parts) < 3:
        raise CellSpecError(f"invalid cell id {cell_id!r}: expected <suite>/bz<B>/<precision>/<N>n<G>g")
    m = _TOPO.match(parts[-1])
    if not m:
        raise CellSpecError(f"invalid cell id {cell_id!r}: last part {parts[-1]!r} is not a topology like 4n8g")
    bz_idx = next((i for i, p in enumerate(parts[:-1]) if _BZ.match(p)), None)
    if bz_idx is None or bz_idx == 0 or bz_idx + 1 >= len(parts) - 1:
        raise CellSpecError(f"invalid cell id {cell_id!r}: expected <suite>/bz<B>/<precision>/<N>n<G>g")
    middle = parts[bz_idx + 2:-1]
    return CellKey(
        cell_id=cell_id,
        suite="/".join(parts[:bz_idx]),
        batch_size=int(_BZ.match(parts[bz_idx])["b"]),
        precision=parts[bz_idx + 1],
        layout_case="/".join(middle) if middle else None,
        topology=parts[-1],
        nodes=int(m["n"]),
        gpus_per_node=int(m["g"]),
    )


def _norm_token(tok: str) -> str:
    tok = tok.strip().lower()
    return "fp16" if tok == "amp" else tok


def match_cell(spec: str, cell_ids: Iterable[str]) -> str:
    """Resolve ``spec`` (full id or parts in any order) to exactly one of ``cell_ids``."""
    ids = sorted(set(cell_ids))
    if spec in ids:
        return spec
    tokens = {_norm_token(t) for t in str(spec).split("/") if t.strip()}
    if not tokens:
        raise CellSpecError("empty cell spec: name a cell like 4n8g/bz32/fp32")
    hits = []
    for cid in ids:
        try:
            key = parse_cell_id(cid)
        except CellSpecError:
            continue
        parts = {key.topology, key.precision}
        if key.batch_size is not None:
            parts.add(f"bz{key.batch_size}")
        if key.layout_case:
            parts.add(key.layout_case.lower())
        if tokens <= {p.lower() for p in parts}:
            hits.append(cid)
    if not hits:
        known = ", ".join(ids[:12]) + (" ..." if len(ids) > 12 else "")
        raise CellSpecError(f"cell {spec!r} matches no cell; known cells: {known or '(none)'}")
    if len(hits) > 1:
        raise CellSpecError(f"cell {spec!r} is ambiguous, it matches: {', '.join(hits)}")
    return hits[0]
