"""core/records.py: a record's repr, equality and hash are exactly a real dataclass's (every
record class on dlperf extract's path against a dataclass twin with the same fields, plus the
field options and corner cases the shared functions must honour)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from dlperf_tasks.catalog import model as catalog_model
from dlperf_tasks.core import model as core_model
from dlperf_tasks.core import samples, topology
from dlperf_tasks.core.records import record
from dlperf_tasks.frameworks import base, launchspec
from dlperf_tasks.measure import extract, lognames, stats

MODULES = (core_model, samples, topology, catalog_model, launchspec, lognames, stats, extract)
RECORDS = [c for m in MODULES for c in vars(m).values()
           if isinstance(c, type) and c.__module__ == m.__name__ and "__record_repr__" in c.__dict__]
VALUES = [0, 1, -2, 2.5, float("nan"), "x", "", "a'b", None, (1, 2), ("x",), frozenset({3})]


def _twin(cls: type) -> type:
    """A plain dataclass with ``cls``'s fields and field options (no defaults: never called)."""
    spec = [(f.name, f.type, dataclasses.field(repr=f.repr, compare=f.compare, hash=f.hash))
            for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=cls.__dataclass_params__.frozen,
                                      order="__lt__" in cls.__dict__)


def _outcome(op, x, y):
    try:
        return op(x, y)
    except TypeError as exc:  # e.g. None < 1: the same error either way
        return type(exc)


def _raw(cls: type, rng: random.Random, values: dict | None = None):
    """An instance of ``cls`` with the given (else random hashable) field values, no __init__."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        object.__setattr__(obj, f.name, (values or {}).get(f.name, rng.choice(VALUES)))
    return obj


def test_the_extract_path_classes_are_records():
    names = {c.__name__ for c in RECORDS}
    assert {"Cell", "Window", "TrialResult", "Suite", "ContainerSpec", "CellStats", "ExtractResult",
            "LogFile", "NodeSpec", "LaunchSpec", "ParsedLog", "LogFacts", "Topology", "Sample"} <= names
    assert "__lt__" in topology.Topology.__dict__ and samples.Sample.__slots__ == samples.SAMPLE_FIELDS


def test_base_still_gives_the_launch_records():
    assert base.NodeSpec is launchspec.NodeSpec and base.LaunchSpec is launchspec.LaunchSpec
    with pytest.raises(AttributeError):
        base.NoSuchName  # noqa: B018


def test_topologies_sort_by_nodes_then_gpus():
    T = topology.Topology
    assert sorted([T(2, 1), T(1, 8), T(1, 1)]) == [T(1, 1), T(1, 8), T(2, 1)] and T(1, 8) <= T(1, 8)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_repr_eq_and_hash_are_a_dataclass_twins(cls):
    twin = _twin(cls)
    rng = random.Random(cls.__name__)
    frozen = cls.__dataclass_params__.frozen
    assert frozen == twin.__dataclass_params__.frozen
    for _ in range(60):
        a = _raw(cls, rng)
        same = _raw(cls, rng, {f.name: getattr(a, f.name) for f in dataclasses.fields(cls)})
        b = _raw(cls, rng)
        assert repr(a) == twin.__repr__(a)
        for x, y in ((a, same), (a, b), (b, a), (a, a)):
            assert (x == y) == twin.__eq__(x, y) and (x != y) == (not twin.__eq__(x, y))
        assert a.__eq__(object()) is NotImplemented is twin.__eq__(a, object())
        for name in ("__lt__", "__le__", "__gt__", "__ge__"):
            if name in cls.__dict__:
                for x, y in ((a, same), (a, b), (b, a)):
                    assert _outcome(getattr(cls, name), x, y) == _outcome(getattr(twin, name), x, y)
                assert getattr(a, name)(object()) is NotImplemented
        if frozen:
            assert hash(a) == twin.__hash__(a)
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(a, dataclasses.fields(cls)[0].name, 1)
        else:
            assert cls.__hash__ is None and twin.__hash__ is None
    for f in dataclasses.fields(cls):  # each compared field decides equality alone
        a = _raw(cls, rng, {g.name: 0 for g in dataclasses.fields(cls)})
        b = _raw(cls, rng, {g.name: 0 for g in dataclasses.fields(cls)} | {f.name: 1})
        assert (a == b) == twin.__eq__(a, b) == (not f.compare)


def _options_classes():
    def body():
        return {"__annotations__": {"a": "int", "b": "str", "c": "list", "d": "int"},
                "b": dataclasses.field(default="s", repr=False),
                "c": dataclasses.field(default_factory=list, compare=False),
                "d": dataclasses.field(default=4, hash=False)}

    for frozen in (False, True):
        ours = record(type("Opt", (), body()), frozen=frozen)
        theirs = dataclasses.dataclass(type("Opt", (), body()), frozen=frozen)
        yield ours, theirs


@pytest.mark.parametrize("ours,theirs", list(_options_classes()))
def test_field_options_defaults_and_replace_as_dataclasses(ours, theirs):
    a, t = ours(1, "z", [1], 5), theirs(1, "z", [1], 5)
    assert repr(a) == repr(t) == "Opt(a=1, c=[1], d=5)"
    assert a == ours(1, "z", [2], 5) and a != ours(1, "y", [1], 5)
    assert (t == theirs(1, "z", [2], 5)) and t != theirs(1, "y", [1], 5)
    if ours.__dataclass_params__.frozen:
        assert hash(a) == hash(t) == hash((1, "z"))
    b = dataclasses.replace(a, a=2)
    assert b.a == 2 and dataclasses.asdict(b) == {"a": 2, "b": "z", "c": [1], "d": 5}
    assert ours(7).c == [] and ours(7).c is not ours(7).c


def test_a_record_that_holds_itself_shows_dots():
    @record
    class Node:
        child: object = None

    @dataclasses.dataclass
    class Twin:
        child: object = None

    n, t = Node(), Twin()
    n.child, t.child = [n], [t]
    assert repr(n) == repr(t).replace("Twin", "Node") == "test_a_record_that_holds_itself_shows_dots.<locals>.Node(child=[...])"


def test_a_class_writing_its_own_repr_eq_or_hash_is_refused():
    for name in ("__repr__", "__eq__", "__hash__"):
        with pytest.raises(TypeError):
            record(type("X", (), {name: lambda self, *a: 0, "__annotations__": {"a": "int"}}))
