"""Read a DLPerf-layout log tree (or a .tar/.tar.gz of one) into trial results and cell statistics.

Layouts understood (the topology is parsed by regex, so ``10n8g`` works)::

    <dir>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.log         DLPerf (prec: fp32 | fp16 | amp, optional _xla)
    <dir>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.node<k>.log  the same trial's log of node k (k >= 1)
    <dir>/.../megatron_lm_perf_<N>n<G>g_dp<D>_mp<M>_pp<P>_mbs<m>_gbs<g>[_l<L>_hsz<H>_ahs<A>]_pretrain_<k>.log
                                                             Megatron (seed 002): node k of one trial

``<dir>`` may be any level above: ``logs/``, ``logs/mxnet/bert/bz32`` or a single ``1n8g``.
Naming rules: :mod:`dlperf_tasks.measure.lognames` (seed 002's Megatron names too; two files for one
trial are refused). Files are only listed while walking (regular files only, no symlink out of
the tree: :mod:`dlperf_tasks.measure.logtree`); each log is streamed in 1 MiB blocks through the suite's
framework parser (``Framework.stream()``: constant memory per log, caps on line length, file
size and lines per trial), then gated (:mod:`dlperf_tasks.measure.validity`).

Use :func:`extract_tree` for a tree on disk (``dlperf extract``, the sweep, Airflow tasks) and
:func:`dlperf_tasks.measure.stats.aggregate` for TrialResults that came from a cluster run.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from pathlib import Path
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from dlperf_tasks import frameworks
from dlperf_tasks.core.digest import sha256_hex
from dlperf_tasks.core.errors import ExtractError
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.measure.lognames import (LOOKED_FOR, MEGATRON_FILE_RE, TOPO_DIR_RE, TRIAL_FILE_RE, LogFile,  # noqa: F401
                                   TrialFiles, discover, is_megatron_style, topology_from_path)
from dlperf_tasks.measure.logtree import MAX_TRIAL_LINES, FileTooLarge, LogTree, read_regular
from dlperf_tasks.core.model import LogFacts, ParsedLog, Samples, Trial, TrialResult, Window
from dlperf_tasks.measure.stats import CellStats, aggregate
from dlperf_tasks.measure.validity import gate, missing_log
from dlperf_tasks.frameworks._lines import _utf8_safe, split_chunks

#: the model key DLPerf's own extractors printed in their result dict, per framework
#: (seed 000: 'bert-base', 003: 'bert', 004: 'rn50'); a suite's ``extra: {dlperf_model: ...}`` wins
DLPERF_MODEL_KEYS = {"mxnet_bert": "bert-base", "tensorflow_bert": "bert", "mxnet_resnet50": "rn50"}

_PROGRESS_EVERY_S = 2.0
_PROGRESS_MIN_TRIALS = 50


@dataclass(slots=True)
class ExtractResult:
    """What :func:`extract_tree` found. ``cells`` are computed from ``trials``."""

    suite: Any  # catalog Suite
    log_dir: str
    window: Window
    trials: list[TrialResult]
    cells: list[CellStats]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relpath, why it was not used)
    files_seen: int = 0
    #: False when the trials' samples were dropped after gating (``extract_tree(keep_samples=False)``
    #: or a ``sample_sink``): the document's ``samples`` are then the sink's placeholders, else []
    samples_kept: bool = True
    sample_refs: dict[int, Any] = field(default_factory=dict)  # id(TrialResult) -> what the sink returned

    @property
    def computable_cells(self) -> list[CellStats]:
        return [c for c in self.cells if c.median is not None]

    def run_metadata(self, **extra: Any) -> dict[str, Any]:
        meta = {
            "run_id": extract_run_id(self.suite.id, self.window, self.trials),
            "suite": self.suite.id,
            "framework": self.suite.framework,
            "source": "extract",
            "log_dir": self.log_dir,
            "window": self.window.to_dict(),
        }
        meta.update(extra)
        return meta


def extract_run_id(suite_id: str, window: Window, trials: Iterable[TrialResult]) -> str:
    """``extract-<suite>-<12 hex>``: the hex is a digest of what was extracted (window, every
    trial's id, status, speed, timestamps and log file names), so two different archives of one
    suite get two ids (publishing the second never replaces the first) while extracting the same
    logs again gives the same id (re-publishing it stays idempotent)."""
    rows = []
    for t in trials:
        m = t.metric
        rows.append([t.trial.id, str(getattr(t.status, "value", t.status)), t.reason,
                     None if m is None else repr(m.value), None if m is None else repr(m.throughput),
                     t.started_at, t.finished_at, sorted(os.path.basename(p) for p in t.log_paths)])
    rows.sort(key=operator.itemgetter(0))  # by trial id (stable: as sorting the trials by it)
    doc = json.dumps({"suite": suite_id, "window": window.to_dict(), "trials": rows}, sort_keys=True, default=str)
    return f"extract-{suite_id}-{sha256_hex(doc.encode())[:12]}"


def dlperf_model_key(suite) -> str | None:
    """Model key of the seeds' result dict for ``suite`` (None: the suite's model name)."""
    extra = getattr(suite, "extra", None) or {}
    return extra.get("dlperf_model") or DLPERF_MODEL_KEYS.get(suite.framework)


def _decode_stream(fh) -> Iterator[str]:
    """The lines of a binary file object (universal newlines, bounded line length); for callers
    that want lines. Extraction itself feeds blocks to ``Framework.stream()``."""
    def blocks():
        with fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    return
                yield b

    return split_chunks(_utf8_safe(blocks()))


# ---------------------------------------------------------------- parsing
def _merge(parsed: dict[int, ParsedLog], metric_nodes: list[int]) -> ParsedLog:
    """One ParsedLog per trial: samples and iteration facts from the metrics node(s), crash
    markers from every node, extras merged (``memory_mib``: the largest seen on any node)."""
    multi = len(parsed) > 1
    if not multi and list(parsed) == list(metric_nodes):
        return next(iter(parsed.values()))  # one log that prints the metrics: merging it changes nothing
    facts = LogFacts()
    samples = Samples()
    extra: dict[str, Any] = {}
    mems = []
    for node in sorted(parsed, key=lambda n: (n in metric_nodes, n)):
        p = parsed[node]
        tag = f"node {node}: " if multi else ""
        facts.crash_markers += [tag + c for c in p.facts.crash_markers]
        facts.lines += p.facts.lines
        extra.update(p.extra)
        if p.extra.get("memory_mib") is not None:
            mems.append(p.extra["memory_mib"])
        if node in metric_nodes:
            samples += p.samples
            facts.iterations_seen = sorted(set(facts.iterations_seen) | set(p.facts.iterations_seen))
            facts.ranks_seen = sorted(set(facts.ranks_seen) | set(p.facts.ranks_seen))
            facts.errors += [tag + e for e in p.facts.errors]
    if mems:
        extra["memory_mib"] = max(mems)
    _merge_run_facts(facts, [parsed[n].facts for n in sorted(parsed, key=lambda n: (n not in metric_nodes, n))])
    return ParsedLog(samples=samples, facts=facts, extra=extra)


#: LogFacts fields read from the run's own arguments / summary: the metrics node's value wins,
#: another node's fills a gap (Megatron prints its arguments block on rank 0 = node 0)
_RUN_FACTS = ("args_source", "batch_per_device", "accumulation", "world_size", "global_batch", "stride",
              "final_loss", "framework_figure", "framework_figure_name")


def _merge_run_facts(into: LogFacts, ordered: list[LogFacts]) -> None:
    for f in ordered:
        for name in _RUN_FACTS:
            if getattr(into, name) in (None, "") and getattr(f, name) not in (None, ""):
                setattr(into, name, getattr(f, name))
        for k, v in f.args.items():
            into.args.setdefault(k, v)
        into.nonfinite_losses += [x for x in f.nonfinite_losses if x not in into.nonfinite_losses]


def _gate_logs(fw: Framework, trial: Trial, logs: dict[int, str], open_blocks: Callable[[str], Iterable[bytes]],
               window: Window, plausible_max_per_gpu: float | None = None, **runtime: Any) -> TrialResult:
    """Parse every node's log of one trial (streaming blocks through ``fw.stream()``, at most
    :data:`MAX_TRIAL_LINES` lines in all), merge, gate. ``runtime``: gate()'s keyword arguments."""
    metric_nodes = fw.metrics_nodes(trial.cell)
    paths = [logs[n] for n in sorted(logs)]
    missing = [n for n in metric_nodes if n not in logs]
    if missing:
        have = ", ".join(paths) or "no log at all"
        what = (f"log of node {', '.join(map(str, missing))} (the node that prints the iteration lines) "
                f"not found; found: {have}")
        if runtime.get("runtime_reason"):
            what = f"{runtime['runtime_reason']}; {what}"
        return missing_log(trial, what, log_paths=paths, **runtime)
    parsed: dict[int, ParsedLog] = {}
    budget = MAX_TRIAL_LINES
    for node, rel in sorted(logs.items()):
        stream = fw.stream(max_lines=budget)
        try:
            for block in open_blocks(rel):
                stream.feed(block)
        except FileTooLarge as exc:
            stream.fc.error(f"{rel}: {exc}")
        except OSError as exc:
            return missing_log(trial, f"cannot read {rel}: {exc}", log_paths=paths, **runtime)
        parsed[node] = stream.close()
        budget = max(budget - parsed[node].facts.lines, 0)
    return gate(fw, trial, _merge(parsed, metric_nodes), window, log_paths=paths,  # (parsed: ours, not read again)
                plausible_max_per_gpu=plausible_max_per_gpu, own_samples=True, **runtime)


def extract_trial(source: LogTree, fw: Framework, tf: TrialFiles, window: Window,
                  plausible_max_per_gpu: float | None = None) -> TrialResult:
    return _gate_logs(fw, tf.trial, {n: lf.relpath for n, lf in tf.logs.items()}, source.blocks, window,
                      plausible_max_per_gpu)


def gate_run_logs(trial: Trial, run_dir: str | os.PathLike, window: Window | None = None, *,
                  plausible_max_per_gpu: float | None = None, **runtime: Any) -> TrialResult:
    """Gate a trial that a sweep ran: its node logs lie in ``run_dir`` at ``Framework.log_relpath``.

    ``runtime`` is passed to :func:`dlperf_tasks.measure.validity.gate`: ``exit_codes``, ``runtime_status``,
    ``runtime_reason``, ``nodes``, ``started_at``, ``finished_at``. Missing node logs other than the
    metrics node(s) are fine (e.g. MXNet's mpirun writes one log on node 0).
    ``plausible_max_per_gpu``: the suite's bound (``suite.extra``; None = the framework's default).
    """
    fw = frameworks.get(trial.cell.framework)
    root = Path(run_dir)
    logs = {}
    for node in range(trial.cell.topology.nodes):
        rel = fw.log_relpath(trial, node)
        if (root / rel).is_file():
            logs[node] = rel
    return _gate_logs(fw, trial, logs, lambda rel: read_regular(root / rel), window or trial.cell.window,
                      plausible_max_per_gpu, **runtime)


def extract_tree(suite, log_dir: str | os.PathLike, batch_size_per_device: int | None = None,
                 window: Window | None = None, *, prefix: str | None = None,
                 progress: TextIO | Callable[[str], None] | None = None, keep_samples: bool = True,
                 sample_sink: Callable[[Samples], Any] | None = None) -> ExtractResult:
    """Parse, gate and aggregate every trial found under ``log_dir`` with ``suite``'s framework.

    Memory: with ``keep_samples=False`` each trial's samples are dropped once it is
    gated (the medians, speedups and reasons need none of them), so memory is that of the largest
    trial, not of the tree. ``sample_sink(samples)`` is called first with each gated trial's samples (e.g.
    :class:`dlperf_tasks.report.result_stream.SampleSpool`'s ``put`` of its samples) and implies
    dropping them; what it returns is the trial's ``samples`` in :meth:`ExtractResult.result`.

    ``window`` defaults to the suite's. ``batch_size_per_device`` keeps only files named
    ``_b<B>_`` (None: every batch size found). ``progress`` (a stream such as sys.stderr, or a
    callable) gets a line every few seconds on large trees. Raises :class:`ExtractError`
    when the tree holds no log that fits the naming.
    """
    root = str(Path(log_dir))  # as the messages and the result's log_dir show it
    if not os.path.exists(root):
        raise ExtractError(f"log directory {root} does not exist")
    window = window or suite.window
    fw = frameworks.get(suite.framework)
    source = LogTree(root)
    bound = (getattr(suite, "extra", None) or {}).get("plausible_max_per_gpu")
    try:
        found, skipped, seen = discover(source.walk(), suite, window, batch_size_per_device, prefix)
        skipped = source.skipped + skipped
        if not found:
            why = ""
            if skipped:
                why = "; not used: " + "; ".join(f"{p} ({r})" for p, r in skipped[:5])
                if len(skipped) > 5:
                    why += f" and {len(skipped) - 5} more"
            bz = f" with batch size {batch_size_per_device}" if batch_size_per_device is not None else ""
            raise ExtractError(f"no usable log{bz} in {root} ({seen} files looked at): expected {LOOKED_FOR}{why}")
        emit = _progress_fn(progress)
        results: list[TrialResult] = []
        last = start = time.monotonic()
        refs: dict[int, Any] = {}
        drop = sample_sink is not None or not keep_samples
        for i, tf in enumerate(found, 1):
            r = extract_trial(source, fw, tf, window, bound)
            if sample_sink is not None:
                refs[id(r)] = sample_sink(r.samples)
            if drop:
                r.samples = Samples()
            results.append(r)
            now = time.monotonic()
            if emit and len(found) >= _PROGRESS_MIN_TRIALS and now - last >= _PROGRESS_EVERY_S:
                emit(f"dlperf extract: {i}/{len(found)} trials parsed ({now - start:.0f} s)")
                last = now
    finally:
        source.close()
    return ExtractResult(suite=suite, log_dir=root, window=window, trials=results,
                         cells=aggregate(results), skipped=skipped, files_seen=seen,
                         samples_kept=not drop, sample_refs=refs)


def _progress_fn(progress) -> Callable[[str], None] | None:
    if progress is None:
        return None
    if callable(progress) and not hasattr(progress, "write"):
        return progress

    def emit(msg: str) -> None:
        progress.write(msg + "\n")
        progress.flush()

    return emit


def default_progress() -> TextIO:
    return sys.stderr
