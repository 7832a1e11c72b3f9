"""nccl-tests ``all_reduce_perf`` output (NVIDIA/nccl-tests ``src/common.cu``), read whole.

Text table: one row a message size, out-of-place then in-place columns::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
           32768          8192     float     sum      -1    18.66    1.76    3.07       0    17.95    1.83    3.20       0

(older releases print no ``root`` column: 12 fields instead of 13), then ``# Avg bus bandwidth : X``.
The transport NCCL chose comes from ``NCCL INFO`` lines (``NCCL_DEBUG=INFO``): ``via P2P/IPC``,
``via NET/IB/0``, ``via NET/Socket/0``, ``via SHM``, ``NVLS``, ``CollNet``.

``-J FILE.json`` output (NVIDIA/nccl-tests@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 ``src/util.cu``, JSON
file version 3): ``{"version", "config", ..., "results": [{"size", "count", "type", "redop", "root",
"out_of_place": {"time" | "cpu_time", "alg_bw", "bus_bw", "nwrong"} | null, "in_place": {...}}]}``.
A row whose out-of-place part is null is read from its in-place part; a row without a size or bus
bandwidth is refused by its index. Documents of other shapes are searched for lists of row objects
holding a ``size`` (older spellings ``algbw``/``busbw`` accepted).

Use: :func:`parse_text(text)` / :func:`parse_json(text)` -> :class:`NcclResult` (rows, average bus
bandwidth, transports, errors). bus bandwidth = algbw x 2(n-1)/n for all-reduce (nccl-tests'
``doc/PERFORMANCE.md``); :func:`busbw_from_algbw` states it. A row with the wrong field count (cut
short, wrapped, glued) is refused by line number; time and memory are linear in the input.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

_INFO_TRANSPORT = re.compile(r"NCCL INFO .*?\bvia (P2P/IPC|P2P/CUMEM|P2P/direct pointer|P2P|SHM|NET/IB|NET/Socket|"
                             r"NET/[A-Za-z0-9_]+|CollNet)")
_NVLS = re.compile(r"NCCL INFO .*\bNVLS\b.*(?:enabled|comm|multicast)", re.IGNORECASE)
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S+)")
_SIZE_ROW = re.compile(r"^\s*\d+\s+\d+\s+\w+\s")


@dataclass
class NcclRow:
    size_bytes: int
    algbw_gbs: float  # out-of-place
    busbw_gbs: float  # out-of-place
    time_us: float
    in_place_busbw_gbs: float | None = None
    wrong: int = 0


@dataclass
class NcclResult:
    rows: list[NcclRow] = field(default_factory=list)
    avg_busbw_gbs: float | None = None
    transports: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def peak_busbw_gbs(self) -> float | None:
        """The largest out-of-place bus bandwidth over the size sweep (the figure a probe compares)."""
        return max((r.busbw_gbs for r in self.rows), default=None)

    @property
    def socket_fallback(self) -> bool:
        """True when NCCL said it used the socket transport and no InfiniBand/RoCE one."""
        return "NET/Socket" in self.transports and "NET/IB" not in self.transports


def busbw_from_algbw(algbw: float, ranks: int) -> float:
    """All-reduce bus bandwidth: algbw x 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    return algbw * 2.0 * (ranks - 1) / ranks


def _f(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_text(text: str) -> NcclResult:
    """Read an ``all_reduce_perf`` text output (and its NCCL INFO lines)."""
    out = NcclResult()
    for no, line in enumerate(text.splitlines(), 1):
        if "NCCL INFO" in line:
            m = _INFO_TRANSPORT.search(line)
            name = m.group(1) if m else ("NVLS" if _NVLS.search(line) else None)
            if name and name not in out.transports:
                out.transports.append(name)
            continue
        if line.lstrip().startswith("#"):
            m = _AVG.search(line)
            if m:
                out.avg_busbw_gbs = _f(m.group(1))
            continue
        if not _SIZE_ROW.match(line):
            continue
        row = _row(line.split(), no, out.errors)
        if row is not None:
            out.rows.append(row)
    if not out.rows:
        out.errors.append("no all_reduce_perf result row (size count type redop ... busbw) in the output")
    return out


def _row(parts: list[str], no: int, errors: list[str]) -> NcclRow | None:
    if len(parts) == 13:  # size count type redop root | time algbw busbw wrong | time algbw busbw wrong
        oop, inp = parts[5:9], parts[9:13]
    elif len(parts) == 12:  # releases without the root column
        oop, inp = parts[4:8], parts[8:12]
    else:
        errors.append(f"line {no}: all_reduce_perf row has {len(parts)} fields, not 12 or 13 (cut short, "
                      "wrapped or glued); refused")
        return None
    t, alg, bus = _f(oop[0]), _f(oop[1]), _f(oop[2])
    if None in (t, alg, bus):
        errors.append(f"line {no}: all_reduce_perf row time/algbw/busbw {oop[:3]} are not all numbers; refused")
        return None
    wrong = int(oop[3]) if oop[3].isdigit() else 0
    return NcclRow(size_bytes=int(parts[0]), algbw_gbs=alg, busbw_gbs=bus, time_us=t,
                   in_place_busbw_gbs=_f(inp[2]), wrong=wrong)


_ALG = ("alg_bw", "algbw")
_BUS = ("bus_bw", "busbw")


def _pick(d: dict, names) -> object:
    for n in names:
        if n in d:
            return d[n]
    return None


def _rows_in(doc, depth: int = 0):
    """Lists of row-like dicts (holding a size and a bus bandwidth somewhere) in a JSON document."""
    if depth > 8:
        return
    if isinstance(doc, list):
        if doc and all(isinstance(x, dict) for x in doc) and any("size" in x for x in doc):
            yield doc
            return
        for x in doc:
            yield from _rows_in(x, depth + 1)
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from _rows_in(v, depth + 1)


def _placement(row: dict) -> dict:
    """A row's figures: its ``out_of_place`` part, else its ``in_place`` part, else the row itself."""
    for key in ("out_of_place", "in_place"):
        if isinstance(row.get(key), dict):
            return row[key]
    return row


def parse_json(text: str) -> NcclResult:
    """Read an ``all_reduce_perf -J`` JSON document; a malformed one is one error, not an exception."""
    out = NcclResult()
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        out.errors.append(f"all_reduce_perf JSON does not parse: {str(exc).splitlines()[0][:160]}")
        return out
    found = [doc["results"]] if isinstance(doc, dict) and isinstance(doc.get("results"), list) else _rows_in(doc)
    for rows in found:
        for i, row in enumerate(rows):
            oop = _placement(row)
            size, alg, bus = row.get("size"), _pick(oop, _ALG), _pick(oop, _BUS)
            t = oop.get("time", oop.get("cpu_time"))
            try:
                inp = row.get("in_place") if isinstance(row.get("in_place"), dict) else {}
                inb = _pick(inp, _BUS)
                out.rows.append(NcclRow(size_bytes=int(size), algbw_gbs=float(alg), busbw_gbs=float(bus),
                                        time_us=float(t) if t is not None else float("nan"),
                                        in_place_busbw_gbs=float(inb) if inb is not None else None))
            except (TypeError, ValueError):
                out.errors.append(f"all_reduce_perf JSON row {i}: size/algbw/busbw missing or not numbers; refused")
    if not out.rows and not out.errors:
        out.errors.append("no all_reduce_perf result row (objects with size and busbw) in the JSON")
    return out
