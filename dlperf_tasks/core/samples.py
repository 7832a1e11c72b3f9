"""Per-iteration measurements: :class:`Sample` (one) and :class:`Samples` (a column store of them).

Why columns (extraction speed): a 4n8g log has thousands of step lines, and one
object per line cost extraction ~20 % of its time (building them, then ``attrgetter`` passes in
the gate and the metric). Parsers add whole columns (:meth:`Samples.add_columns`), the gate and
the metrics read ``iteration``/``value``/... at C speed, and anything else sees a sequence of
:class:`Sample`: iterating, indexing and ``reversed`` build them on demand.

A loss column may be given as text (:class:`LazyFloats`): its values are converted the first time
``loss`` is read. Most readers never read it (the final loss is a fact of its own), and the
conversion was a fifth of the MXNet BERT parse. The parser checks the text first (plain decimal
numbers only), so the conversion cannot fail and every value is finite.

:mod:`dlperf_tasks.core.model` re-exports these names; pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any


@dataclass(slots=True)
class Sample:
    """One per-iteration measurement taken from a log (PerfKit-style: value + unit + metadata).

    Treat as immutable (not ``frozen``: a log builds one per iteration, and a frozen dataclass's
    ``__init__`` is several times slower)."""

    iteration: int
    value: float  # throughput (samples/s) or latency (ms/iteration), see ``unit``
    unit: str  # "samples/s" | "ms/iter" | "s" (timestamp-only logs: value is the timestamp)
    rank: int | None = None
    timestamp: float | None = None  # seconds (absolute or relative), when the log prints one
    memory_mib: float | None = None
    loss: float | None = None  # the loss the framework printed for this iteration (mlm+nsp, lm loss...)


#: the fields of :class:`Sample`, in order: the columns of :class:`Samples`
SAMPLE_FIELDS = ("iteration", "value", "unit", "rank", "timestamp", "memory_mib", "loss")


class LazyFloats:
    """``n`` values given as texts of ``n`` newline-separated decimal numbers each, combined with
    ``op`` (e.g. ``operator.add`` of the mlm and the nsp loss). The caller has checked the texts:
    :meth:`values` must not fail. Holding the texts costs less memory than the floats would."""

    __slots__ = ("n", "op", "texts")

    def __init__(self, n: int, op: Callable[..., float] | None, *texts: str) -> None:
        if not texts or (len(texts) > 1 and op is None):
            raise ValueError("LazyFloats: one text, or several texts and an op to combine them")
        self.n, self.op, self.texts = n, op, texts

    def values(self) -> list[float]:
        cols = [map(float, t.split("\n")) for t in self.texts]
        out = list(map(self.op, *cols)) if self.op is not None else list(cols[0])
        if len(out) != self.n:
            raise ValueError(f"LazyFloats: {len(out)} values, {self.n} expected")
        return out


class Samples:
    """The samples of a log or a trial, stored as columns (one list per :class:`Sample` field).
    ``==`` compares with another Samples or any sequence of Sample."""

    __slots__ = ("iteration", "value", "unit", "rank", "timestamp", "memory_mib", "_loss", "_lazy")

    def __init__(self, samples: Any = ()) -> None:
        # one statement per column (not a loop over the names): a trial builds a few of these
        self.iteration: list[int] = []
        self.value: list[float] = []
        self.unit: list[str] = []
        self.rank: list[int | None] = []
        self.timestamp: list[float | None] = []
        self.memory_mib: list[float | None] = []
        self._loss: list[Any] = []
        self._lazy: list[tuple[int, LazyFloats]] = []  # (offset in _loss, texts not converted yet)
        if samples:
            self.extend(samples)

    @property
    def loss(self) -> list:
        if self._lazy:
            for off, col in self._lazy:
                self._loss[off:off + col.n] = col.values()
            self._lazy = []
        return self._loss

    @loss.setter
    def loss(self, values: list) -> None:
        self._loss, self._lazy = values, []

    # ------------------------------------------------------------ adding
    def add_columns(self, iteration: list, value: list, unit: Any, rank: Any = None, timestamp: Any = None,
                    memory_mib: Any = None, loss: Any = None) -> None:
        """Append ``len(iteration)`` samples. ``iteration`` and ``value`` are lists; each other
        argument is a list of the same length or one value for every sample (a str or None);
        ``loss`` may also be a :class:`LazyFloats` of the same length."""
        n = len(iteration)
        cols = (value, unit, rank, timestamp, memory_mib, loss)
        if any(isinstance(c, list) and len(c) != n for c in cols) or (isinstance(loss, LazyFloats) and loss.n != n):
            lens = [len(c) if isinstance(c, list) else c.n if isinstance(c, LazyFloats) else "one" for c in cols]
            raise ValueError(f"Samples.add_columns: {n} iterations but columns of {lens} values "
                             "(value, unit, rank, timestamp, memory_mib, loss)")
        self.iteration += iteration
        self.value += value
        self.unit += unit if isinstance(unit, list) else [unit] * n
        self.rank += rank if isinstance(rank, list) else [rank] * n
        self.timestamp += timestamp if isinstance(timestamp, list) else [timestamp] * n
        self.memory_mib += memory_mib if isinstance(memory_mib, list) else [memory_mib] * n
        if isinstance(loss, LazyFloats):
            self._lazy.append((len(self._loss), loss))
            self._loss += [None] * n
        else:
            self._loss += loss if isinstance(loss, list) else [loss] * n

    def append(self, s: Sample) -> None:
        self.iteration.append(s.iteration)
        self.value.append(s.value)
        self.unit.append(s.unit)
        self.rank.append(s.rank)
        self.timestamp.append(s.timestamp)
        self.memory_mib.append(s.memory_mib)
        self._loss.append(s.loss)

    def extend(self, other: Any) -> None:
        if isinstance(other, Samples):  # column by column; texts not converted yet stay so
            base = len(self._loss)
            self.add_columns(other.iteration, other.value, other.unit, other.rank, other.timestamp,
                             other.memory_mib, other._loss)
            self._lazy += [(base + off, col) for off, col in other._lazy]
        else:
            for s in other:
                self.append(s)

    def __iadd__(self, other: Any) -> "Samples":
        self.extend(other)
        return self

    def clear(self) -> None:
        for col in (self.iteration, self.value, self.unit, self.rank, self.timestamp, self.memory_mib, self._loss):
            col.clear()
        self._lazy = []

    def copy(self) -> "Samples":
        out = Samples()
        out.extend(self)
        return out

    # ------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self.iteration)

    def __iter__(self):
        return map(Sample, self.iteration, self.value, self.unit, self.rank, self.timestamp, self.memory_mib,
                   self.loss)

    def __reversed__(self):
        return map(Sample, *(reversed(getattr(self, name)) for name in SAMPLE_FIELDS))

    def __getitem__(self, i):
        if isinstance(i, slice):
            out = Samples()
            for name in SAMPLE_FIELDS:
                setattr(out, name, getattr(self, name)[i])
            return out
        return Sample(*(getattr(self, name)[i] for name in SAMPLE_FIELDS))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Samples):
            return all(getattr(self, n) == getattr(other, n) for n in SAMPLE_FIELDS)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        head = ", ".join(map(repr, self[:3]))
        return f"Samples({len(self)}: [{head}{', ...' if len(self) > 3 else ''}])"

    def __getstate__(self) -> dict:
        return {name: getattr(self, name) for name in SAMPLE_FIELDS}  # lazy texts converted

    def __setstate__(self, state: dict) -> None:
        self._lazy = []
        for name in SAMPLE_FIELDS:
            setattr(self, name, list(state[name]))


def as_samples(samples: Any) -> Samples:
    """``samples`` as a :class:`Samples` (a Samples is returned as is, a sequence of Sample copied)."""
    return samples if isinstance(samples, Samples) else Samples(samples)
