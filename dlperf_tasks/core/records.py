"""``@record`` / ``@record(frozen=True)``: a dataclass whose ``__repr__``, ``__eq__`` and (frozen)
``__hash__`` are shared functions instead of methods compiled for the class.

``@dataclass`` compiles each method it writes from generated source text: 3 per class, 6 per
frozen one, ~0.2 ms each, ~15 ms of ``dlperf extract``'s start-up over the 18 classes of its path.
A record is an ordinary dataclass (``fields``, ``replace``, ``asdict``, pickling, ``__init__`` and
the frozen ``__setattr__``/``__delattr__`` are dataclasses' own) whose repr, equality and hash
are the shared functions below, which give the same results as dataclasses' generated ones:
the repr lists the ``repr=True`` fields as ``Name(a=1, b='x')`` (``...`` on recursion), two
records are equal when they are of the same class and their ``compare=True`` fields are equal,
a frozen record hashes the tuple of its ``hash``/``compare`` fields and a mutable one is
unhashable, an ``order=True`` one compares the tuples of its compared fields (tests/unit/test_records.py checks each record class against a real dataclass twin).
Only ``__dataclass_params__`` tells them apart (``repr``/``eq`` False there).
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from reprlib import recursive_repr


@recursive_repr()
def _repr(self) -> str:
    shown = type(self).__record_repr__
    return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"


def _getter(names: tuple[str, ...]):
    """The tuple of a record's fields ``names``, at C speed (a Cell is hashed on every trial)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq(self, other):
    if other.__class__ is self.__class__:
        key = type(self).__record_compare_key__
        return key(self) == key(other)
    return NotImplemented


def _order(name: str):
    """``__lt__``/``__le__``/``__gt__``/``__ge__``: the compared fields' tuples, same class only."""
    op = {"__lt__": tuple.__lt__, "__le__": tuple.__le__, "__gt__": tuple.__gt__, "__ge__": tuple.__ge__}[name]

    def compare(self, other):
        if other.__class__ is self.__class__:
            key = type(self).__record_compare_key__
            return op(key(self), key(other))
        return NotImplemented

    compare.__name__ = compare.__qualname__ = name
    return compare


ORDER = {name: _order(name) for name in ("__lt__", "__le__", "__gt__", "__ge__")}


def _hash(self) -> int:
    return hash(type(self).__record_hash_key__(self))


def _build(cls: type, frozen: bool, order: bool, slots: bool) -> type:
    own = cls.__dict__
    if any(name in own for name in ("__repr__", "__eq__", "__hash__", *ORDER)):
        raise TypeError(f"{cls.__qualname__}: a record writes __repr__/__eq__/__hash__/order itself (use @dataclass)")
    cls = dataclasses.dataclass(cls, repr=False, eq=False, frozen=frozen, slots=slots)
    fields = dataclasses.fields(cls)
    cls.__record_repr__ = tuple(f.name for f in fields if f.repr)
    cls.__record_compare__ = tuple(f.name for f in fields if f.compare)
    cls.__record_hash__ = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    cls.__record_compare_key__ = staticmethod(_getter(cls.__record_compare__))
    cls.__record_hash_key__ = staticmethod(_getter(cls.__record_hash__))
    cls.__repr__ = _repr
    cls.__eq__ = _eq
    cls.__hash__ = _hash if frozen else None
    if order:
        for name, compare in ORDER.items():
            setattr(cls, name, compare)
    return cls


def record(cls: type | None = None, /, *, frozen: bool = False, order: bool = False, slots: bool = False):
    """``@record``, ``@record(frozen=True, order=True, slots=True)``: see the module's docstring."""
    if cls is None:
        return lambda c: _build(c, frozen, order, slots)
    return _build(cls, frozen, order, slots)
