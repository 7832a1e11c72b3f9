"""Modules imported on first attribute access: DAG files name the engine, store and decision layers at
module level, but only the tasks use them, so a DAG parse (every 30 s in the DAG processor) does not
import them, nor the packages above them (every DAG parse would pay for their imports)."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module ``name``; the first attribute read imports it (``importlib.import_module``)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_module(name: str) -> Any:
    """``name`` as an object whose attributes are the module's, imported on first use."""
    return LazyModule(name)
