"""Helpers shared by the bench/ scripts: timing, peak memory in a fresh child process,
plain-text tables and the "goal met/missed" line.

Every benchmark measures its workload in a *fresh* Python process (``run_worker``) so that
peak RSS (``resource.getrusage``) belongs to that workload alone and not to whatever the
parent imported or generated before.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python bench/x.py` from anywhere
    sys.path.insert(0, str(ROOT))

WORKER_FLAG = "--_worker"


class BenchError(RuntimeError):
    """A real error while benchmarking (not a missed goal)."""


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def machine() -> str:
    """Short description of the machine the numbers were taken on."""
    return f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}"


class Timer:
    """``with Timer() as t: ...; t.s`` -> elapsed wall seconds (monotonic clock)."""

    def __enter__(self) -> "Timer":
        self.t0 = time.perf_counter()
        self.s = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.s = time.perf_counter() - self.t0


def run_worker(script: str | Path, payload: dict[str, Any], timeout: float = 1800.0,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --_worker <payload JSON>`` in a fresh interpreter and return the JSON object
    it prints as its last stdout line. Raises :class:`BenchError` with the child's stderr when it fails."""
    cmd = [sys.executable, str(script), WORKER_FLAG, json.dumps(payload)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{Path(script).name} worker ran longer than {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise BenchError(f"{Path(script).name} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise BenchError(f"{Path(script).name} worker printed nothing; stderr:\n{proc.stderr[-4000:]}")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise BenchError(f"{Path(script).name} worker's last line is not JSON: {lines[-1][:300]!r}") from exc


def worker_main(argv: Sequence[str], fn: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """If ``argv`` asks for worker mode, run ``fn(payload)``, print its JSON result and return True."""
    if len(argv) >= 2 and argv[0] == WORKER_FLAG:
        out = fn(json.loads(argv[1]))
        out.setdefault("peak_rss_mib", round(peak_rss_mib(), 1))
        sys.stdout.write("\n" + json.dumps(out) + "\n")
        sys.stdout.flush()
        return True
    return False


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned plain-text table."""
    cells = [[str(h) for h in head]] + [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    fmt = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(cells[0]), fmt(["-" * w for w in widths])] + [fmt(r) for r in cells[1:]])


def goal(name: str, measured: float, target: float, *, lower_is_better: bool = True, unit: str = "") -> str:
    """``"<name>: goal met (...)"`` / ``"goal missed by X"``; never raises (a missed goal is not an error)."""
    ok = measured <= target if lower_is_better else measured >= target
    rel = "<=" if lower_is_better else ">="
    u = f" {unit}" if unit else ""
    m, t, d = _num(measured), _num(target), _num(abs(measured - target))
    if ok:
        return f"{name}: goal met ({m}{u} {rel} {t}{u})"
    return f"{name}: goal missed by {d}{u} ({m}{u}, goal {rel} {t}{u})"


def _num(x: float) -> str:
    """Integers as integers (1024, not 1.02e+03), other numbers with 3 significant digits."""
    if float(x).is_integer() and abs(x) < 1e12:
        return str(int(x))
    return f"{x:.3g}"


def save_json(path: str | None, data: dict[str, Any]) -> None:
    """Write the measured numbers to ``path`` (``--json``), if given."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def human_mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.1f} MB"
