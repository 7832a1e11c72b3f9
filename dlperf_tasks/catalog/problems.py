"""The problems of one suite file: collected with their key path, reported together as
``<file>:<line>: <key path>: <what is wrong>``."""

from __future__ import annotations

from typing import Any

from dlperf_tasks.catalog.yamlsrc import KeyPath, format_path
from dlperf_tasks.core.errors import CatalogError, PlanError
from dlperf_tasks.core.topology import Topology


class Problems:
    """Collects ``(key path, message)`` and renders them with file and line."""

    def __init__(self, filename: str, lines: dict):
        self.filename = filename
        self.lines = lines
        self.items: list[str] = []

    def add(self, path: KeyPath, message: str, label: str = "") -> None:
        line = None
        p: tuple | None = tuple(path)
        while line is None and p is not None:
            line = self.lines.get(p)
            p = p[:-1] if p else None
        where = f"{self.filename}:{line}" if line else self.filename
        self.items.append(f"{where}: {format_path(tuple(path))}{label}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            err = CatalogError("\n".join(self.items))
            err.problems = list(self.items)  # type: ignore[attr-defined]
            raise err



def topology_at(text: Any, path: KeyPath, problems: Problems) -> Topology | None:
    try:
        return Topology.parse(str(text))
    except PlanError as exc:
        problems.add(path, str(exc))
        return None


def no_dupes(values: list, path: KeyPath, what: str, problems: Problems) -> None:
    seen = set()
    for i, v in enumerate(values):
        if v in seen:
            problems.add(path + (i,), f"duplicate {what} {v!r}")
        seen.add(v)
