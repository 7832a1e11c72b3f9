"""Progress lines of a run: trial start, every few seconds while it runs (iteration, speed with
its unit, ETA), its end (status, value rounded with its unit) and notes.

``emit`` goes to a stream (``dlperf sweep``: stderr) or to a callable (a task's logger)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO

from dlperf_tasks.model import MetricKind, Trial, TrialResult

MARK = "dlperf: "


def fmt_duration(s: float) -> str:
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def fmt_value(r: TrialResult) -> str:
    """``82.73 samples/s`` / ``464.12 ms/iter`` (or '' when the trial has no metric)."""
    m = r.metric
    if m is None or m.value is None:
        return ""
    unit = "ms/iter" if m.kind == MetricKind.LATENCY else "samples/s"
    return f"{m.value:.2f} {unit}"


@dataclass
class _Seen:
    t0: float
    last_it: int
    last_emit: float


class Display:
    """Thread-safe progress lines; ``every_s``: the least time between two lines of one trial."""

    def __init__(self, out: TextIO | Callable[[str], None] | None, total: int, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.out, self.total, self.every_s, self.clock = out, total, every_s, clock
        self.done = 0
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def emit(self, text: str) -> None:
        if self.out is None:
            return
        with self._lock:
            if callable(self.out) and not hasattr(self.out, "write"):
                self.out(f"{MARK}{text}")  # a task log: the mark lets make run pick the line out
            else:
                print(f"[{time.strftime('%H:%M:%S')}] {text}", file=self.out, flush=True)

    def started(self, trial: Trial, nodes: list[str]) -> None:
        self._seen[trial.id] = _Seen(self.clock(), 0, self.clock())
        self.emit(f"start  {trial.cell.id} trial {trial.index} on {','.join(nodes)}")

    def iteration(self, trial: Trial, nodes: list[str], iteration: int, total: int) -> None:
        """Called often; prints at most every ``every_s`` seconds per trial, and the last iteration."""
        now = self.clock()
        seen = self._seen.setdefault(trial.id, _Seen(now, 0, now))
        last = iteration >= total > seen.last_it
        if not iteration or (now - seen.last_emit < self.every_s and not last):
            return
        seen.last_emit, seen.last_it = now, iteration
        self.emit(f"       {trial.cell.id} trial {trial.index} on {','.join(nodes)}: "
                  + rate_text(trial, iteration, total, now - seen.t0))

    def progress(self, p) -> None:
        """Adapter for the remote trial runner's Progress objects."""
        if p.state == "starting":
            self.started(p.trial, p.nodes)
        elif p.state == "running":
            self.iteration(p.trial, p.nodes, p.iteration, p.total)

    def finished(self, r: TrialResult, attempt: int = 1) -> None:
        self.done += 1
        self._seen.pop(r.trial.id, None)
        val = f" {fmt_value(r)}" if r.valid else ""
        why = f" ({r.reason[:200]})" if r.reason and not r.valid else ""
        self.emit(f"[{self.done}/{self.total}] {r.status.value}{val} {r.trial.cell.id} trial {r.trial.index} "
                  f"on {','.join(r.nodes)} (attempt {attempt}){why}")


def _num(v: float) -> str:
    """Three significant digits, never an exponent: 2050, 205, 20.5, 2.05, 0.205."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def rate_text(trial: Trial, iteration: int, total: int, elapsed_s: float) -> str:
    """``iteration 40/120, 3.2 it/s (~205 samples/s), ETA 25 s``: the speed is the whole
    trial's mean so far (warm-up included), as a guide; the measured value comes at the end."""
    text = f"iteration {iteration}/{total}"
    if elapsed_s <= 0 or iteration <= 0:
        return text
    rate = iteration / elapsed_s
    cell = trial.cell
    samples = rate * cell.batch_size_per_device * cell.topology.world_size
    text += f", {_num(rate)} it/s (~{_num(samples)} samples/s)"
    if total > iteration:
        text += f", ETA {fmt_duration((total - iteration) / rate)}"
    return text
