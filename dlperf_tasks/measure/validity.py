"""The validity gate: decide whether a trial's numbers may enter the statistics.

A trial is valid (``TrialStatus.OK``) only when

* every node's exit code is 0 (when known),
* the log holds every expected iteration (up to ``window.total``, without gaps),
* every rank the framework expects printed iteration lines,
* every sample value is finite (and > 0, except raw timestamps),
* no crash marker (``Traceback``, ``NCCL error``, ``Killed`` ...) and no parse error was seen,
* the framework's own :meth:`Framework.check` has no objection,
* the framework's speed rule yields a finite value > 0,
* no iteration is logged twice by the same rank (see :func:`repeated_iterations`),
* every loss the log printed is finite (:attr:`LogFacts.nonfinite_losses`), and so is every
  gradient norm inside the window; the model the log's own arguments name is the cell's
  (:mod:`dlperf_tasks.measure.trained`),
* the value is physically plausible (:func:`plausibility_problem`, :func:`sample_bound_problems`):
  no iteration (a logged ``ms/iter`` sample, the metric's latency, or the time a throughput
  implies for one global batch) longer than a day; samples/s per GPU at most the suite's
  ``plausible_max_per_gpu`` (catalog), or for latency metrics no iteration (sample or metric)
  below that floor nor below the framework's own per-cell floor
  (:meth:`Framework.latency_floor_ms`, e.g. Megatron's FLOP count at a peak no GPU reaches).

Otherwise the result keeps its raw samples (and, where the speed rule could still be
applied, the raw value) with status ``INVALID_LOG`` (``NONZERO_EXIT`` for a non-zero exit
code), or keeps a runtime status such as ``HANG`` / ``TIMEOUT`` that the runner set.
``reason`` names every problem, separated by ``"; "``.

Pure logic, no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from operator import sub
from collections.abc import Mapping

from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.measure import llm_result
from dlperf_tasks.measure.trained import grad_norm_problems, model_problems
from dlperf_tasks.core.model import MetricKind, ParsedLog, Samples, Trial, TrialMetric, TrialResult, TrialStatus, Window

#: sample units whose value is a timestamp (may be 0 or negative relative times)
_TIMESTAMP_UNITS = {"s"}
_MAX_LISTED = 5
#: no training iteration of a benchmark takes longer than a day (a 1e308 ms line is a broken log)
DAY_MS = 86_400_000.0


def _fmt_list(items: list) -> str:
    shown = ", ".join(str(i) for i in items[:_MAX_LISTED])
    return shown + (f" (+{len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else "")


def _ranges(numbers: list[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'"""
    out: list[str] = []
    start = prev = None
    for n in numbers:
        if start is None:
            start = prev = n
        elif prev is not None and n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if start != prev else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else str(start))
    return _fmt_list(out)


def iteration_problems(iterations: list[int], window: Window) -> list[str]:
    """Reasons why ``iterations`` (distinct iteration numbers seen) do not cover the window.

    The stride is the most common step between consecutive iterations, so logs that print
    every 10th iteration (Megatron ``--log-interval 10``) are checked for gaps too.
    """
    its = sorted(set(iterations))
    if not its:
        return ["no iteration lines found in the log"]
    problems = []
    last = its[-1]
    if last < window.total:
        problems.append(
            f"log ends at iteration {last}, expected {window.total} "
            f"({window.warmup} warm-up + {window.measure} measured): truncated or crashed run"
        )
    upto = its[:bisect_right(its, window.total)]  # sorted: the iterations up to the window's end
    if len(upto) >= 2 and upto[-1] - upto[0] != len(upto) - 1:  # else: distinct ints, every step 1, no gap
        diffs = Counter(map(sub, upto[1:], upto))
        stride, times = diffs.most_common(1)[0]
        if times == len(upto) - 1:  # every step is the stride: no gap
            return problems
        missing: list[int] = []
        for a, b in zip(upto, upto[1:]):
            if b - a != stride:
                missing.extend(range(a + stride, b, stride) if stride > 0 else [])
        if missing:
            problems.append(f"missing iterations {_ranges(missing)}")
    return problems


def generic_problems(parsed: ParsedLog, window: Window, expected_ranks: list[int] | None = None,
                     exit_codes: Mapping[str, int | None] | None = None) -> tuple[list[str], bool]:
    """Framework-independent checks. Returns (reasons, nonzero_exit)."""
    reasons: list[str] = []
    nonzero = False
    for node, code in sorted((exit_codes or {}).items()):
        if code is not None and code != 0:
            reasons.append(f"{node} exited with code {code}")
            nonzero = True
    facts = parsed.facts
    if facts.crash_markers:
        reasons.append(f"crash marker in log: {_fmt_list(list(dict.fromkeys(facts.crash_markers)))}")
    if facts.errors:
        reasons.append(f"unparsable lines: {_fmt_list(facts.errors)}")
    reasons.extend(iteration_problems(facts.iterations_seen or parsed.samples.iteration, window))
    if expected_ranks and facts.ranks_seen:  # only logs that name ranks (e.g. mpirun --tag-output)
        missing = sorted(set(expected_ranks) - set(facts.ranks_seen))
        if missing:
            reasons.append(f"ranks {_fmt_list(missing)} printed no iteration lines")
    bad = [] if _all_values_fine(parsed.samples) else _bad_values(parsed.samples)
    if bad:
        reasons.append(f"non-finite or non-positive values ({len(bad)}): {_fmt_list(bad)}")
    if facts.nonfinite_losses:
        reasons.append(f"non-finite loss ({len(facts.nonfinite_losses)}): {_fmt_list(facts.nonfinite_losses)}")
    reasons.extend(repeated_iterations(parsed, expected_ranks))
    return reasons, nonzero


def _all_values_fine(samples: Samples) -> bool:
    """Fast path (C-level min/sum over the value column): every value a finite number, > 0 unless a timestamp."""
    vals = samples.value
    try:
        if not vals:
            return True
        total = sum(vals)
    except TypeError:
        return False
    if not -math.inf < total < math.inf:  # NaN or an infinity somewhere
        return False
    return min(vals) > 0 or set(samples.unit) <= _TIMESTAMP_UNITS


def _bad_values(samples) -> list[str]:
    bad = []
    for s in samples:
        v = s.value
        ok = isinstance(v, (int, float)) and math.isfinite(v)
        if ok and s.unit not in _TIMESTAMP_UNITS:
            ok = v > 0
        if not ok:
            bad.append(f"iteration {s.iteration}: {v!r}")
    return bad


def repeated_iterations(parsed: ParsedLog, expected_ranks: list[int] | None = None) -> list[str]:
    """Iterations a rank logged more than once (a restarted or concatenated run: which copy would
    the window measure?). The one legitimate repetition is one line per rank and step where every
    rank prints and lines carry no rank (MXNet BERT without ``--tag-output``): those are counted per
    step against the world size by the framework's own check, not here."""
    if expected_ranks and not parsed.facts.ranks_seen:
        return []
    samples = parsed.samples
    if len(set(samples.iteration)) == len(samples):  # distinct iterations: distinct keys
        return []
    keys = list(zip(samples.iteration, samples.rank))
    if len(set(keys)) == len(keys):
        return []
    seen: dict[tuple, object] = {}
    dups: list[str] = []
    for s in parsed.samples:
        key = (s.iteration, s.rank)
        if key in seen:
            if len(dups) < _MAX_LISTED:
                who = f" (rank {s.rank})" if s.rank is not None else ""
                dups.append(f"{s.iteration}{who}: {seen[key]!r} and {s.value!r}")
            else:
                dups.append("")
        else:
            seen[key] = s.value
    if not dups:
        return []
    shown = "; ".join(d for d in dups if d)
    return [f"iteration logged twice ({len(dups)}): {shown} (a restarted or concatenated log, or several processes printing the "
            "same step without a rank tag; rerun the trial)"]


def plausibility_problem(metric: TrialMetric, world: int, bound: float | None,
                         global_batch: int | None = None, floor_ms: float | None = None) -> str | None:
    """The physical bounds of a metric, whatever the log says: a latency longer than a day
    (:data:`DAY_MS`) or below ``bound`` (the catalog floor) or ``floor_ms`` (the framework's
    per-cell floor); samples/s per GPU above ``bound`` (the catalog ceiling), or so low that one
    ``global_batch`` would take longer than a day. Non-finite values are left to the caller."""
    v = metric.value
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    if MetricKind(metric.kind) == MetricKind.LATENCY:
        if v > DAY_MS:
            return f"latency {v:.6g} ms/iter is longer than a day ({DAY_MS:.0f} ms/iter): not a real iteration"
        if bound is not None and bound > 0 and v < bound:
            return (f"latency {v!r} ms/iter is below the plausible floor {bound:g} ms/iter "
                    "(catalog plausible_max_per_gpu)")
        if floor_ms and v < floor_ms:
            return f"latency {v!r} ms/iter is below the cell's floor {floor_ms:.4g} ms/iter ({_FLOOR_WHY})"
        return None
    per_gpu = v / max(world, 1)
    if bound is not None and bound > 0 and per_gpu > bound:
        return (f"{per_gpu:.4g} samples/s per GPU is above the plausible maximum {bound:g} "
                "(catalog plausible_max_per_gpu)")
    if global_batch and global_batch / v > DAY_MS / 1000.0:
        return (f"{v:.6g} samples/s means one global batch of {global_batch} takes longer than a day "
                f"({DAY_MS / 1000:.0f} s): not a real run")
    return None


#: the only units :func:`sample_bound_problems` bounds
_BOUNDED_UNITS = frozenset(("ms/iter", "samples/s"))

_FLOOR_WHY = "the framework's FLOP count for one iteration at a per-GPU peak above any GPU's"


def sample_bound_problems(samples: Samples, world: int, bound: float | None, kind: MetricKind,
                          batch_per_device: int | None = None, floor_ms: float | None = None) -> list[str]:
    """Logged values outside physical sense (each line, not only the metric: one 1e-300 ms line
    among twelve moves a mean 8 % without leaving any bound). ``ms/iter`` lines: longer than a
    day, or (latency metrics) below the catalog floor ``bound`` / the framework's ``floor_ms``, or
    (throughput metrics, per-device batch known) faster than ``bound`` samples/s per GPU allows.
    ``samples/s`` lines (global speeds): above ``bound`` x GPUs. Non-positive and non-finite values
    are reported by :func:`generic_problems`."""
    vals, units = samples.value, samples.unit
    if not vals:
        return []
    lo_ms, lo_why = 0.0, "catalog plausible_max_per_gpu"
    if MetricKind(kind) == MetricKind.LATENCY:
        lo_ms = bound or 0.0
        if floor_ms and floor_ms > lo_ms:
            lo_ms, lo_why = floor_ms, _FLOOR_WHY
    elif bound and batch_per_device:
        lo_ms, lo_why = 1000.0 * batch_per_device / bound, (f"{batch_per_device} samples per GPU at the catalog's "
                                                            f"plausible_max_per_gpu {bound:g} samples/s")
    hi_rate = bound * max(world, 1) if bound and MetricKind(kind) != MetricKind.LATENCY else math.inf
    try:
        kinds = set(units)
        if kinds.isdisjoint(_BOUNDED_UNITS):
            return []  # e.g. "s" (timestamp-only logs): the loop below bounds no other unit
        if kinds == {"ms/iter"} and lo_ms < min(vals) and max(vals) <= DAY_MS:
            return []
        if kinds == {"samples/s"} and max(vals) <= hi_rate:
            return []
    except TypeError:
        return []  # a non-number: generic_problems names it
    long, short, fast = [], [], []
    for it, v, unit in zip(samples.iteration, vals, units):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            continue
        if unit == "ms/iter" and v > DAY_MS:
            long.append(f"iteration {it}: {v:.6g} ms")
        elif unit == "ms/iter" and v < lo_ms:
            short.append(f"iteration {it}: {v:.6g} ms")
        elif unit == "samples/s" and v > hi_rate:
            fast.append(f"iteration {it}: {v:.6g} samples/s")
    out = []
    if long:
        out.append(f"{len(long)} logged iteration(s) longer than a day ({DAY_MS:.0f} ms/iter): {_fmt_list(long)}")
    if short:
        out.append(f"{len(short)} logged iteration(s) below the plausible floor {lo_ms:.4g} ms/iter ({lo_why}): "
                   f"{_fmt_list(short)}")
    if fast:
        out.append(f"{len(fast)} logged speed(s) above the plausible maximum {hi_rate:g} samples/s ({bound:g} per GPU "
                   f"x {world} GPUs, catalog plausible_max_per_gpu): {_fmt_list(fast)}")
    return out


def _latency_floor(framework: Framework, cell, facts=None) -> float | None:
    """The framework's per-cell latency floor (ms/iteration), if it states one."""
    fn = getattr(framework, "latency_floor_ms", None)
    try:
        return fn(cell, facts) if fn is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _metric_problem(metric: TrialMetric) -> str | None:
    v = metric.value
    if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return f"speed rule gave {v!r} (must be finite and > 0)"
    return None


def gate(framework: Framework, trial: Trial, parsed: ParsedLog, window: Window | None = None, *,
         exit_codes: Mapping[str, int | None] | None = None,
         runtime_status: TrialStatus | None = None, runtime_reason: str = "",
         log_paths: list[str] | None = None, nodes: list[str] | None = None,
         started_at: float | None = None, finished_at: float | None = None,
         plausible_max_per_gpu: float | None = None, own_samples: bool = False,
         gpu_models: Mapping[str, str | None] | None = None) -> TrialResult:
    """Check one trial and compute its metric.

    ``window`` defaults to the cell's window. ``runtime_status`` is what the runner saw
    (``HANG``, ``TIMEOUT``, ``NONZERO_EXIT``...); any status other than OK/None is kept,
    with the log problems appended to the reason. ``plausible_max_per_gpu``: the suite's bound
    (None: the framework's default ``Framework.plausible_max_per_gpu``). ``own_samples``: the
    caller hands ``parsed`` over and never reads it again, so its samples become the result's
    as they are (else the result gets a copy). ``gpu_models``: ``{node: nvidia-smi GPU name}`` of
    the trial's nodes (the LLM figures' MFU needs it).
    """
    cell = trial.cell
    window = window or cell.window
    reasons, nonzero = generic_problems(parsed, window, framework.expected_ranks(cell), exit_codes)
    reasons.extend(model_problems(cell.model, parsed.facts.args, parsed.facts.args_source))
    reasons.extend(grad_norm_problems(parsed.extra.get("nonfinite_grad_norms") or (), window.warmup, window.total))
    span = None  # the window's two logged steps, for the check and the speed rule alike
    try:
        span = framework.step_span(parsed, cell, window)
        reasons.extend(framework.check(parsed, cell, window, span=span))
    except Exception as exc:  # a framework check must not take the whole extraction down
        reasons.append(f"{framework.name} check failed: {type(exc).__name__}: {exc}")

    metric: TrialMetric | None = None
    try:
        metric = framework.trial_metric(parsed, cell, window, span=span)
    except Exception as exc:
        if not reasons:  # only worth saying when nothing else explains it
            reasons.append(f"speed rule failed: {type(exc).__name__}: {exc}")
    if metric is not None and framework.llm_name:
        try:
            llm_result.attach(framework.llm_name, cell, parsed, window, metric, gpu_models)
        except Exception as exc:  # the figures beside the metric must not take the trial down
            metric.details["llm"] = {"error": f"{type(exc).__name__}: {exc}"}
    bound = plausible_max_per_gpu if plausible_max_per_gpu is not None else framework.plausible_max_per_gpu
    floor_ms = _latency_floor(framework, cell, parsed.facts)
    world = cell.topology.world_size
    reasons.extend(sample_bound_problems(parsed.samples, world, bound, framework.metric_kind,
                                         cell.batch_size_per_device, floor_ms))
    if metric is not None and not reasons:
        gbs = cell.batch_size_per_device * world
        problem = (_metric_problem(metric) or plausibility_problem(metric, world, bound, gbs, floor_ms))
        if problem:
            reasons.append(problem)

    status: TrialStatus
    if runtime_status is not None and runtime_status is not TrialStatus.OK:
        status = runtime_status
        reasons = ([runtime_reason] if runtime_reason else [runtime_status.value.lower()]) + reasons
    elif nonzero:
        status = TrialStatus.NONZERO_EXIT
    elif reasons:
        status = TrialStatus.INVALID_LOG
    else:
        status = TrialStatus.OK
    return TrialResult(
        trial=trial, status=status, reason="; ".join(reasons), metric=metric,
        samples=parsed.samples if own_samples else parsed.samples.copy(), log_paths=list(log_paths or []), nodes=list(nodes or []),
        exit_codes=dict(exit_codes or {}), started_at=started_at, finished_at=finished_at,
    )


def missing_log(trial: Trial, what: str, *, log_paths: list[str] | None = None,
                runtime_status: TrialStatus | None = None, exit_codes: Mapping[str, int | None] | None = None,
                nodes: list[str] | None = None, started_at: float | None = None,
                finished_at: float | None = None, **_ignored) -> TrialResult:
    """A trial whose metrics log is absent or unreadable: status INVALID_LOG, or NONZERO_EXIT when a
    node's exit code says so, or the runner's own status (HANG, TIMEOUT...)."""
    bad = [f"{n} exited with code {c}" for n, c in sorted((exit_codes or {}).items()) if c not in (None, 0)]
    if runtime_status not in (None, TrialStatus.OK):
        status = runtime_status
    elif bad:
        status = TrialStatus.NONZERO_EXIT
    else:
        status = TrialStatus.INVALID_LOG
    return TrialResult(trial=trial, status=status, reason="; ".join(bad + [what]), log_paths=list(log_paths or []),
                       nodes=list(nodes or []), exit_codes=dict(exit_codes or {}), started_at=started_at,
                       finished_at=finished_at)
