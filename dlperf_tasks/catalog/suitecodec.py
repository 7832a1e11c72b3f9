"""The suite cache's file format (catalog/suitecache.py): a :class:`Suite` as :mod:`marshal` data.

``pickle``'s import is ~1.5 ms of every ``dlperf extract`` (struct, _compat_pickle...), marshal is
built in. A Suite is plain data: records (the classes in :data:`CLASSES`, each written as its
instance ``__dict__``), tuples, lists, dicts, frozensets, str, int, float, bool, None. Anything else
(another class, a subclass of dict...) raises :class:`TypeError` in :func:`dumps`, so that suite
is simply not cached. A record is written as ``(TAG, class name, fields)``; a real tuple that starts
with a bytes value is refused, so nothing else reads back as a record. :func:`loads` rebuilds each
record as unpickling does (``object.__new__``, then its ``__dict__``): the same classes, types and
values (tests/unit/test_suitecache.py round-trips every built-in suite).
"""

from __future__ import annotations

import marshal

from dlperf_tasks.catalog.model import ContainerSpec, Patch, Suite, Upstream
from dlperf_tasks.core.model import ParallelLayout, Window
from dlperf_tasks.core.topology import Topology

#: the record classes a Suite holds, by name
CLASSES = {c.__name__: c for c in (Suite, ContainerSpec, Patch, Upstream, Window, Topology, ParallelLayout)}
TAG = b"dlperf-record"
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _out(value):
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is tuple:
        if value and type(value[0]) is bytes:
            raise TypeError("a tuple starting with bytes")
        return tuple(_out(v) for v in value)
    if kind is list:
        return [_out(v) for v in value]
    if kind is dict:
        return {_out(k): _out(v) for k, v in value.items()}
    if kind is frozenset:
        return frozenset(_out(v) for v in value)
    if CLASSES.get(kind.__name__) is kind:
        return (TAG, kind.__name__, {name: _out(v) for name, v in vars(value).items()})
    raise TypeError(f"a {kind.__name__} value")


def _in(value):
    kind = type(value)
    if kind is tuple:
        if value and type(value[0]) is bytes:
            if value[0] != TAG:
                raise ValueError("not a suite cache entry")
            obj = object.__new__(CLASSES[value[1]])
            obj.__dict__.update({name: _in(v) for name, v in value[2].items()})
            return obj
        return tuple(_in(v) for v in value)
    if kind is list:
        return [_in(v) for v in value]
    if kind is dict:
        return {_in(k): _in(v) for k, v in value.items()}
    if kind is frozenset:
        return frozenset(_in(v) for v in value)
    return value


def dumps(suite: Suite) -> bytes:
    """``suite`` as bytes; TypeError when it holds a value this format does not write."""
    if type(suite) is not Suite:
        raise TypeError(f"a {type(suite).__name__}, not a Suite")
    return marshal.dumps(_out(suite), 4)


def loads(data: bytes) -> Suite:
    """The Suite :func:`dumps` wrote (ValueError, EOFError, KeyError... on anything else)."""
    suite = _in(marshal.loads(data))
    if type(suite) is not Suite:
        raise ValueError("not a suite cache entry")
    return suite
