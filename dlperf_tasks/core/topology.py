"""Topologies such as ``1n1g``, ``2n8g`` or ``16n8g`` (parsed by regex, never by position)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlperf_tasks.core.errors import PlanError

_TOPO_RE = re.compile(r"^(?P<nodes>[1-9]\d*)n(?P<gpus>[1-9]\d*)g$")


@dataclass(frozen=True, order=True, slots=True)
class Topology:
    nodes: int
    gpus_per_node: int

    @classmethod
    def parse(cls, text: str) -> "Topology":
        m = _TOPO_RE.fullmatch(str(text).strip()[:64])
        if not m or len(str(text).strip()) > 64:
            shown = repr(text) if len(str(text)) <= 40 else f"{str(text)[:40]!r}... ({len(str(text))} characters)"
            raise PlanError(f"invalid topology {shown}: expected <nodes>n<gpus>g, e.g. 1n8g or 16n8g")
        return cls(int(m["nodes"]), int(m["gpus"]))

    @property
    def name(self) -> str:
        return f"{self.nodes}n{self.gpus_per_node}g"

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.name


BASELINE = Topology(1, 1)
