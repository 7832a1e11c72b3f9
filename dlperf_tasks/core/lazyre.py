"""Regular expressions compiled on first use (start-up of ``dlperf extract``: a pattern that only
a rare input needs, a Megatron file name or a crash line, costs nothing to a run that never meets one).

``lazy(pattern)`` stands for ``re.compile(pattern)``: the methods and attributes of the compiled
pattern (``search``, ``match``, ``sub``, ``groupindex``...) are those of the real one, compiled the
first time any of them is asked for; ``pattern`` and ``flags`` need no compilation. It is not a
``re.Pattern`` (``isinstance`` says no): use it where a pattern's methods are called.
"""

from __future__ import annotations

import re


class LazyPattern:
    """A ``re.compile(pattern, flags)`` done the first time one of its attributes is used."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def compiled(self) -> re.Pattern[str]:
        rx = self.__dict__.get("_rx")
        if rx is None:
            rx = self.__dict__["_rx"] = re.compile(self.pattern, self.flags)
        return rx

    def __getattr__(self, name: str):
        # only for what the instance does not hold yet: the bound method is kept, so the next
        # call finds it as a plain attribute
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self.compiled(), name)
        if callable(value):
            setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return f"lazy({self.pattern!r})"


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    return LazyPattern(pattern, flags)
