"""Read a DLPerf-layout log tree (or a .tar/.tar.gz of one) into trial results and cell statistics.

Layouts understood (the topology is parsed by regex, so ``10n8g`` works)::

    <dir>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.log         DLPerf (prec: fp32 | fp16 | amp, optional _xla)
    <dir>/<N>n<G>g/<prefix>_b<B>_<prec>_<trial>.node<k>.log  the same trial's log of node k (k >= 1)
    <dir>/.../megatron_lm_perf_<N>n<G>g_dp<D>_mp<M>_pp<P>_mbs<m>_gbs<g>[_l<L>_hsz<H>_ahs<A>]_pretrain_<k>.log
                                                             Megatron (seed 002): node k of one trial

``<dir>`` may be any level above: ``logs/``, ``logs/mxnet/bert/bz32`` or a single ``1n8g``.
Files are only listed while walking; each log is streamed line by line through the
suite's framework parser (constant memory per log), then gated (:mod:`dlperf_tasks.validity`).

Use :func:`extract_tree` for a tree on disk (``dlperf extract``, the sweep, Airflow tasks) and
:func:`dlperf_tasks.stats.aggregate` for TrialResults that came from a cluster run.
"""

from __future__ import annotations

import io
import lzma
import os
import re
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Iterator, Mapping, TextIO

from dlperf_tasks import frameworks
from dlperf_tasks.errors import ExtractError
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.model import Cell, LogFacts, MetricKind, ParallelLayout, ParsedLog, Trial, TrialResult, Window
from dlperf_tasks.stats import CellStats, aggregate
from dlperf_tasks.topology import Topology
from dlperf_tasks.validity import gate, missing_log

TOPO_DIR_RE = re.compile(r"^(?P<nodes>[1-9]\d*)n(?P<gpus>[1-9]\d*)g$")
TRIAL_FILE_RE = re.compile(
    r"^(?P<prefix>.+?)_b(?P<bz>[1-9]\d*)_(?P<prec>fp32|fp16|amp)(?P<xla>_xla)?_(?P<trial>[1-9]\d*)"
    r"(?:\.node(?P<node>\d+))?\.log$")
MEGATRON_FILE_RE = re.compile(
    r"^(?P<stem>(?P<prefix>.*?)_?(?P<nodes>[1-9]\d*)n(?P<gpus>[1-9]\d*)g_dp(?P<dp>\d+)_mp(?P<mp>\d+)_pp(?P<pp>\d+)"
    r"_mbs(?P<mbs>\d+)_gbs(?P<gbs>\d+)(?:_l(?P<layers>\d+))?(?:_hsz(?P<hidden>\d+))?(?:_ahs(?P<heads>\d+))?"
    r"(?P<rest>.*?))_pretrain_(?P<node>\d+)\.log$")

LOOKED_FOR = ("<N>n<G>g/<prefix>_b<B>_<fp32|fp16|amp>[_xla]_<trial>.log (DLPerf layout, e.g. 1n8g/bert_b32_fp32_1.log) "
              "or megatron_lm_perf_<N>n<G>g_dp<D>_mp<M>_pp<P>_mbs<m>_gbs<g>..._pretrain_<node>.log")

MAX_LINE = 256 * 1024  # characters kept of one log line
#: the model key DLPerf's own extractors printed in their result dict, per framework
#: (seed 000: 'bert-base', 003: 'bert', 004: 'rn50'); a suite's ``extra: {dlperf_model: ...}`` wins
DLPERF_MODEL_KEYS = {"mxnet_bert": "bert-base", "tensorflow_bert": "bert", "mxnet_resnet50": "rn50"}

_PROGRESS_EVERY_S = 2.0
_PROGRESS_MIN_TRIALS = 50


@dataclass
class LogFile:
    """One log file found in the tree."""

    relpath: str  # relative to the log dir (POSIX separators)
    node: int  # node rank this log belongs to


@dataclass
class TrialFiles:
    trial: Trial
    logs: dict[int, LogFile] = field(default_factory=dict)  # node rank -> file


@dataclass
class ExtractResult:
    """What :func:`extract_tree` found. ``cells`` are computed from ``trials``."""

    suite: Any  # catalog Suite
    log_dir: str
    window: Window
    trials: list[TrialResult]
    cells: list[CellStats]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relpath, why it was not used)
    files_seen: int = 0

    @property
    def computable_cells(self) -> list[CellStats]:
        return [c for c in self.cells if c.median is not None]

    def run_metadata(self, **extra: Any) -> dict[str, Any]:
        meta = {
            "run_id": f"extract-{self.suite.id}",
            "suite": self.suite.id,
            "framework": self.suite.framework,
            "source": "extract",
            "log_dir": self.log_dir,
            "window": {"warmup": self.window.warmup, "measure": self.window.measure},
        }
        meta.update(extra)
        return meta

    def result(self, run: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The result JSON document (see report/result_json.py)."""
        from dlperf_tasks.report.result_json import build_result

        return build_result(self.cells, self.run_metadata(**dict(run or {})), dlperf_model=dlperf_model_key(self.suite))


def dlperf_model_key(suite) -> str | None:
    """Model key of the seeds' result dict for ``suite`` (None: the suite's model name)."""
    extra = getattr(suite, "extra", None) or {}
    return extra.get("dlperf_model") or DLPERF_MODEL_KEYS.get(suite.framework)


# ---------------------------------------------------------------- sources
class _Source:
    """A log tree: a directory or a tar archive. Lists relative paths, streams one file's lines."""

    def __init__(self, root: Path):
        self.root = root
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        if root.is_file():
            try:
                is_tar = tarfile.is_tarfile(root)
                if is_tar:
                    self.tar = tarfile.open(root, "r:*")  # reads headers only; members are streamed on demand
            except _ARCHIVE_ERRORS as exc:
                raise ExtractError(f"archive {root} is truncated or corrupt: {type(exc).__name__}: {exc}") from None
            if not is_tar:
                raise ExtractError(f"--log-dir {root} is a file but not a tar archive; give a directory of logs "
                                   "or a .tar/.tar.gz of one")

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def walk(self) -> Iterator[str]:
        if self.tar is not None:
            try:
                for m in self.tar:  # iterating reads the member headers, not their data
                    if m.isfile():
                        rel = str(PurePosixPath(m.name.lstrip("./") or m.name))
                        self.members[rel] = m
                        yield rel
            except _ARCHIVE_ERRORS as exc:
                raise ExtractError(f"archive {self.root} is truncated or corrupt after {len(self.members)} "
                                   f"file(s): {type(exc).__name__}: {exc}") from None
            return
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            for name in sorted(filenames):
                yield Path(dirpath, name).relative_to(self.root).as_posix()

    def lines(self, rel: str) -> Iterator[str]:
        """Stream a log line by line."""
        if self.tar is not None:
            fh = self.tar.extractfile(self.members[rel])
            if fh is None:
                return iter(())
            return _archive_guard(_decode_stream(fh), f"{rel} in archive {self.root}")
        return _decode_stream(open(self.root / rel, "rb"))


#: what a truncated/corrupt .tar(.gz|.bz2|.xz) raises while it is read
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)


def _archive_guard(lines: Iterator[str], what: str) -> Iterator[str]:
    """Re-raise a decompression error in the middle of a member as OSError (the trial is then
    INVALID_LOG "cannot read ..." instead of the whole extraction dying with a traceback)."""
    try:
        yield from lines
    except _ARCHIVE_ERRORS as exc:
        raise OSError(f"{what} is truncated or corrupt ({type(exc).__name__}: {exc})") from None


def _decode_stream(fh) -> Iterator[str]:
    """Yield the lines of a binary file object, like Python's universal-newline mode (``\\r`` and
    ``\\r\\n`` end lines too, which is how DLPerf's extractors saw tqdm-polluted logs).

    Constant memory: a line longer than :data:`MAX_LINE` characters is cut, its head kept and
    the rest up to the next line break dropped (a binary blob cannot exhaust memory).
    """
    with io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline=None) as text:
        skipping = False
        while True:
            line = text.readline(MAX_LINE)
            if not line:
                return
            complete = line.endswith("\n")
            if not skipping:
                yield line.rstrip("\n").replace("\x00", "")
            skipping = not complete


# ---------------------------------------------------------------- naming
def topology_from_path(rel: str) -> Topology | None:
    """The nearest ``<N>n<G>g`` directory above the file."""
    for part in reversed(PurePosixPath(rel).parts[:-1]):
        m = TOPO_DIR_RE.match(part)
        if m:
            return Topology(int(m["nodes"]), int(m["gpus"]))
    return None


def _precision(tag: str) -> str:
    return "amp" if tag in ("fp16", "amp") else "fp32"


def _layout_group(dp: int, mp: int, pp: int) -> str:
    if pp > 1:
        return "PP"
    if dp > 1 and mp > 1:
        return "2D"
    if mp > 1:
        return "MP"
    return "DP"


def _megatron_layout(suite, topo: Topology, m: re.Match) -> ParallelLayout:
    dp, mp, pp = int(m["dp"]), int(m["mp"]), int(m["pp"])
    mbs, gbs = int(m["mbs"]), int(m["gbs"])
    layers = int(m["layers"]) if m["layers"] else None
    hidden = int(m["hidden"]) if m["hidden"] else None
    heads = int(m["heads"]) if m["heads"] else None
    for t, layout in getattr(suite, "layouts", ()) or ():
        if (t == topo and (layout.dp, layout.mp, layout.pp, layout.micro_batch, layout.global_batch) ==
                (dp, mp, pp, mbs, gbs)
                and layers in (None, layout.num_layers) and hidden in (None, layout.hidden_size)
                and heads in (None, layout.num_heads)):
            return layout
    # not in the catalog: name it the seed-002 way (<group>_<dp>x<mp>x<pp>_<gbs>_<hidden>x<layers>)
    group = _layout_group(dp, mp, pp)
    h, l, a = hidden or 0, layers or 0, heads or 0
    return ParallelLayout(group=group, case=f"{group}_{dp}x{mp}x{pp}_{gbs}_{h}x{l}", dp=dp, mp=mp, pp=pp,
                          micro_batch=mbs, global_batch=gbs, hidden_size=h, num_heads=a, num_layers=l)


def is_megatron_style(suite) -> bool:
    """Suites whose logs are named the Megatron way (seed 002): parallel layouts / latency metric."""
    if getattr(suite, "layouts", None):
        return True
    try:
        return frameworks.get(suite.framework).metric_kind == MetricKind.LATENCY
    except KeyError:
        return False


def discover(source_files: Iterable[str], suite, window: Window, batch_size_per_device: int | None = None,
             prefix: str | None = None) -> tuple[list[TrialFiles], list[tuple[str, str]], int]:
    """Group the files of a tree into trials. Returns (trials, skipped, files_seen)."""
    megatron = is_megatron_style(suite)
    trials: dict[tuple, TrialFiles] = {}
    skipped: list[tuple[str, str]] = []
    prefixes: dict[str, str] = {}  # prefix -> first file
    seen = 0
    for rel in source_files:
        seen += 1
        name = PurePosixPath(rel).name
        if not name.endswith(".log"):
            continue
        m = TRIAL_FILE_RE.match(name)
        mm = MEGATRON_FILE_RE.match(name)
        if m and not mm:
            if megatron:
                skipped.append((rel, f"DLPerf-style log, but suite {suite.id} reads Megatron logs (..._pretrain_<k>.log)"))
                continue
            topo = topology_from_path(rel)
            if topo is None:
                skipped.append((rel, "no <N>n<G>g directory above it"))
                continue
            bz = int(m["bz"])
            if batch_size_per_device is not None and bz != batch_size_per_device:
                skipped.append((rel, f"batch size {bz} != --batch-size-per-device {batch_size_per_device}"))
                continue
            if prefix is not None and m["prefix"] != prefix:
                skipped.append((rel, f"prefix {m['prefix']!r} != {prefix!r}"))
                continue
            prefixes.setdefault(m["prefix"], rel)
            cell = Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision=_precision(m["prec"]),
                        batch_size_per_device=bz, topology=topo, xla=bool(m["xla"]), window=window)
            trial = Trial(cell, int(m["trial"]))
            node = int(m["node"]) if m["node"] else 0
            key = (str(PurePosixPath(rel).parent), m["prefix"], cell, trial.index)
        else:
            if not mm:
                skipped.append((rel, "name does not match the DLPerf log naming"))
                continue
            if not megatron:
                skipped.append((rel, f"Megatron log, but suite {suite.id} is not a Megatron suite"))
                continue
            topo = Topology(int(mm["nodes"]), int(mm["gpus"]))
            layout = _megatron_layout(suite, topo, mm)
            cell = Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision="amp",
                        batch_size_per_device=layout.micro_batch, topology=topo, layout=layout, window=window)
            trial = Trial(cell, 1)
            node = int(mm["node"])
            key = (str(PurePosixPath(rel).parent), mm["stem"], cell, 1)
        if node >= cell.topology.nodes:
            skipped.append((rel, f"node {node} does not exist in a {cell.topology.name} run"))
            continue
        tf = trials.setdefault(key, TrialFiles(trial))
        tf.logs[node] = LogFile(rel, node)
    if len(prefixes) > 1 and prefix is None:
        listed = ", ".join(f"{p!r} (e.g. {f})" for p, f in sorted(prefixes.items()))
        raise ExtractError(f"the log tree mixes several workloads: file prefixes {listed}; "
                           "point --log-dir at one model's directory or pass --prefix")
    # the same trial found in two directories: keep the first, say so
    unique: dict[Trial, TrialFiles] = {}
    for tf in trials.values():
        if tf.trial in unique:
            first = unique[tf.trial]
            for lf in tf.logs.values():
                skipped.append((lf.relpath, f"duplicate of trial {tf.trial.id} already read from "
                                            f"{next(iter(first.logs.values())).relpath}"))
            continue
        unique[tf.trial] = tf
    return list(unique.values()), skipped, seen


# ---------------------------------------------------------------- parsing
def _merge(parsed: dict[int, ParsedLog], metric_nodes: list[int]) -> ParsedLog:
    """One ParsedLog per trial: samples and iteration facts from the metrics node(s), crash
    markers from every node, extras merged (``memory_mib``: the largest seen on any node)."""
    multi = len(parsed) > 1
    facts = LogFacts()
    samples = []
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
    return ParsedLog(samples=samples, facts=facts, extra=extra)


def _gate_logs(fw: Framework, trial: Trial, logs: dict[int, str], open_lines: Callable[[str], Iterable[str]],
               window: Window, **runtime: Any) -> TrialResult:
    """Parse every node's log of one trial, merge, gate. ``runtime``: gate()'s keyword arguments."""
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
    for node, rel in sorted(logs.items()):
        try:
            parsed[node] = fw.parse(open_lines(rel))
        except OSError as exc:
            return missing_log(trial, f"cannot read {rel}: {exc}", log_paths=paths, **runtime)
    return gate(fw, trial, _merge(parsed, metric_nodes), window, log_paths=paths, **runtime)


def extract_trial(source: _Source, fw: Framework, tf: TrialFiles, window: Window) -> TrialResult:
    return _gate_logs(fw, tf.trial, {n: lf.relpath for n, lf in tf.logs.items()}, source.lines, window)


def gate_run_logs(trial: Trial, run_dir: str | os.PathLike, window: Window | None = None, **runtime: Any) -> TrialResult:
    """Gate a trial that a sweep ran: its node logs lie in ``run_dir`` at ``Framework.log_relpath``.

    ``runtime`` is passed to :func:`dlperf_tasks.validity.gate`: ``exit_codes``, ``runtime_status``,
    ``runtime_reason``, ``nodes``, ``started_at``, ``finished_at``. Missing node logs other than the
    metrics node(s) are fine (e.g. MXNet's mpirun writes one log on node 0).
    """
    fw = frameworks.get(trial.cell.framework)
    root = Path(run_dir)
    logs = {}
    for node in range(trial.cell.topology.nodes):
        rel = fw.log_relpath(trial, node)
        if (root / rel).is_file():
            logs[node] = rel
    return _gate_logs(fw, trial, logs, lambda rel: _decode_stream(open(root / rel, "rb")),
                      window or trial.cell.window, **runtime)


def extract_tree(suite, log_dir: str | os.PathLike, batch_size_per_device: int | None = None,
                 window: Window | None = None, *, prefix: str | None = None,
                 progress: TextIO | Callable[[str], None] | None = None) -> ExtractResult:
    """Parse, gate and aggregate every trial found under ``log_dir`` with ``suite``'s framework.

    ``window`` defaults to the suite's. ``batch_size_per_device`` keeps only files named
    ``_b<B>_`` (None: every batch size found). ``progress`` (a stream such as sys.stderr, or a
    callable) gets a line every few seconds on large trees. Raises :class:`ExtractError`
    when the tree holds no log that fits the naming.
    """
    root = Path(log_dir)
    if not root.exists():
        raise ExtractError(f"log directory {root} does not exist")
    window = window or suite.window
    fw = frameworks.get(suite.framework)
    source = _Source(root)
    try:
        found, skipped, seen = discover(source.walk(), suite, window, batch_size_per_device, prefix)
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
        for i, tf in enumerate(found, 1):
            results.append(extract_trial(source, fw, tf, window))
            now = time.monotonic()
            if emit and len(found) >= _PROGRESS_MIN_TRIALS and now - last >= _PROGRESS_EVERY_S:
                emit(f"dlperf extract: {i}/{len(found)} trials parsed ({now - start:.0f} s)")
                last = now
    finally:
        source.close()
    return ExtractResult(suite=suite, log_dir=str(root), window=window, trials=results,
                         cells=aggregate(results), skipped=skipped, files_seen=seen)


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
