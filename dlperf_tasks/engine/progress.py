"""Progress lines of a run: trial start, every few seconds while it runs (iteration, speed in
the result's unit, ETA), its end (``[done/planned]``, status, value rounded with its unit) and notes.

The speed is counted like the speed rule: global samples per iteration (world x batch per GPU x
gradient accumulation, or the layout's global batch) over the wall time between two sightings
of the iteration counter, measured from the first sighting at or after the warm-up (before it,
from the first iteration seen: start-up time never counts). The ETA is the remaining iterations
at that speed. A DAG run's trial tasks count the trials done in the whole DAG run
(:func:`dlperf_tasks.engine.trials.display_for`), not ``[1/1]`` per task.

``emit`` goes to a stream (``dlperf sweep``: stderr) or to a callable (a task's logger)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, TextIO, cast

from dlperf_tasks.core.model import MetricKind, Trial, TrialResult
from dlperf_tasks import frameworks

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
    first: tuple[int, float] | None = None  # (iteration, time) of the first iteration seen
    warm: tuple[int, float] | None = None  # the first sighting at or after the warm-up

    def see(self, iteration: int, now: float, warmup: int) -> None:
        if iteration > 0 and self.first is None:
            self.first = (iteration, now)
        if iteration >= max(warmup, 1) and self.warm is None:
            self.warm = (iteration, now)

    def rate(self, iteration: int, now: float) -> float | None:
        """Iterations per second since the warm-up's end (else since the first iteration seen)."""
        for ref in (self.warm, self.first):
            if ref is not None and iteration > ref[0] and now > ref[1]:
                return (iteration - ref[0]) / (now - ref[1])
        return None


class Display:
    """Thread-safe progress lines; ``every_s``: the least time between two lines of one trial."""

    def __init__(self, out: TextIO | Callable[[str], None] | None, total: int, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, count_done: Callable[[str], int] | None = None):
        """``total``: trials planned; ``count_done(trial_key)``: trials done so far, this one included
        (a DAG run's tasks count them where every task's records meet), else this display counts."""
        self.out, self.total, self.every_s, self.clock = out, total, every_s, clock
        self.count_done = count_done
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
                print(f"[{time.strftime('%H:%M:%S')}] {text}", file=cast(TextIO, self.out), flush=True)

    def started(self, trial: Trial, nodes: list[str]) -> None:
        self._seen[trial.id] = _Seen(self.clock(), 0, self.clock())
        self.emit(f"start  {trial.cell.id} trial {trial.index} on {','.join(nodes)}")

    def iteration(self, trial: Trial, nodes: list[str], iteration: int, total: int) -> None:
        """Called often; prints at most every ``every_s`` seconds per trial, and the last iteration."""
        now = self.clock()
        seen = self._seen.setdefault(trial.id, _Seen(now, 0, now))
        seen.see(iteration, now, trial.cell.window.warmup)
        last = iteration >= total > seen.last_it
        if not iteration or (now - seen.last_emit < self.every_s and not last):
            return
        seen.last_emit, seen.last_it = now, iteration
        self.emit(f"       {trial.cell.id} trial {trial.index} on {','.join(nodes)}: "
                  + rate_text(trial, iteration, total, seen.rate(iteration, now)))

    def progress(self, p) -> None:
        """Adapter for the remote trial runner's Progress objects."""
        if p.state == "starting":
            self.started(p.trial, p.nodes)
        elif p.state == "running":
            self.iteration(p.trial, p.nodes, p.iteration, p.total)

    def finished(self, r: TrialResult, attempt: int = 1) -> None:
        self.done += 1
        if self.count_done is not None:
            try:
                self.done = max(1, int(self.count_done(r.trial.key)))
            except Exception:  # noqa: BLE001 - a display never fails a trial; keep this display's count
                pass
        self._seen.pop(r.trial.id, None)
        val = f" {fmt_value(r)}" if r.valid else ""
        why = f" ({r.reason[:200]})" if r.reason and not r.valid else ""
        self.emit(f"[{self.done}/{self.total}] {r.status.value}{val} {r.trial.cell.id} trial {r.trial.index} "
                  f"on {','.join(r.nodes)} (attempt {attempt}){why}")


def _num(v: float) -> str:
    """Three significant digits, never an exponent: 2050, 205, 20.5, 2.05, 0.205."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def samples_per_iteration(cell) -> int:
    """Global samples of one logged iteration, as the speed rules count them."""
    if cell.layout is not None:
        return int(cell.layout.global_batch)
    return cell.batch_size_per_device * cell.topology.world_size * (cell.accumulation or 1)


def _latency(cell) -> bool:
    try:
        return frameworks.get(cell.framework).metric_kind == MetricKind.LATENCY
    except Exception:  # noqa: BLE001 - an unknown framework: show samples/s
        return False


def rate_text(trial: Trial, iteration: int, total: int, rate: float | None) -> str:
    """``iteration 40/120, 205 samples/s, ETA 25 s`` (``464 ms/iter`` for latency suites):
    ``rate`` is iterations/s counted like the speed rule (:class:`_Seen`); without one yet (the
    first iteration, or none since) only the iteration is shown."""
    text = f"iteration {iteration}/{total}"
    if not rate or rate <= 0 or iteration <= 0:
        return text
    cell = trial.cell
    speed = f"{_num(rate * samples_per_iteration(cell))} samples/s"
    text += f", {_num(1000.0 / rate)} ms/iter (~{speed})" if _latency(cell) else f", {speed}"
    if total > iteration:
        text += f", ETA {fmt_duration((total - iteration) / rate)}"
    return text
