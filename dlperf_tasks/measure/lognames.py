"""Log file names of a DLPerf-layout tree -> trials (which file is which node of which trial).

DLPerf layout (seeds 000, 001, 003, 004)::

    <N>n<G>g/<prefix>_b<B>_<fp32|fp16|amp>[_xla]_<trial>.log          node 0 (DLPerf's own name)
    <N>n<G>g/<prefix>_b<B>_<prec>[_xla]_<trial>.node<k>.log           node k of the same trial
    <N>n<G>g/<prefix>_b<B>_<prec>_ga<A>_<trial>.log                   a cell with gradient accumulation A (pytorch-bert)

Megatron (seed 002), every name seed 002 publishes; the last number is the node (rank) index::

    megatron_lm_perf_<N>n<G>g_dp<D>_mp<M>_pp<P>_mbs<m>_gbs<g>[_l<L>_hsz<H>_ahs<A>]_pretrain_<k>.log
    megatron_lm_perf_..._gbs<g>_pretrain_<hidden>_<layers>_<heads>_<k>.log
    megatron_lm_perf_..._gbs<g>_<CASE>_<k>.log                         e.g. ..._MP_1x16x1_16_3072x16_1.log
    megatron_pretrain_gpt_<N>n<G>d_dp<D>_mp<M>_pp<P>_mbz<m>_gbz<g>_s<S>_l<L>_h<H>_nh<A>_rank<k>.log

A Megatron case is identified by its **name**: a ``<CASE>`` in the file name, else a directory
named like a case (dlperf's own layout ``<case>/<N>n<G>g/<trial>/...``), else the one catalog
case whose numbers match; when two catalog cases share the numbers (DP_8x1x1 and 2D_8x1x1) and
nothing names the case, the file is not used (with that reason) rather than merged into one.
The trial number is a directory of digits right above the file (``.../<trial>/x.log``), else 1.

Two files for the same node of the same trial (``bert_b32_amp_1.log`` beside ``bert_b32_fp16_1.log``,
``_1.log`` beside ``_1.node0.log``) are refused with an error naming both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from collections.abc import Iterable

from dlperf_tasks import frameworks
from dlperf_tasks.core.errors import ExtractError
from dlperf_tasks.core.model import Cell, MetricKind, ParallelLayout, Trial, Window
from dlperf_tasks.core.topology import Topology

TOPO_DIR_RE = re.compile(r"(?P<nodes>[1-9]\d{0,3})n(?P<gpus>[1-9]\d{0,3})g\Z")
TRIAL_FILE_RE = re.compile(
    r"(?P<prefix>.+?)_b(?P<bz>[1-9]\d{0,6})_(?P<prec>fp32|fp16|amp)(?P<xla>_xla)?(?:_ga(?P<ga>[1-9]\d{0,5}))?"
    r"_(?P<trial>[1-9]\d{0,6})"
    r"(?:\.node(?P<node>\d{1,4}))?\.log\Z")
_CASE = r"(?:DP|MP|2D|PP|DP_PP|MP_PP|2D_PP)_\d+x\d+x\d+_\d+_\d+x\d+"
CASE_RE = re.compile(_CASE + r"\Z")
MEGATRON_FILE_RE = re.compile(
    r"(?P<stem>(?P<prefix>.*?)_?(?P<nodes>[1-9]\d{0,3})n(?P<gpus>[1-9]\d{0,3})[gd]_dp(?P<dp>\d+)_mp(?P<mp>\d+)"
    r"_pp(?P<pp>\d+)_mb[sz](?P<mbs>\d+)_gb[sz](?P<gbs>\d+)(?:_s(?P<seq>\d+))?(?:_l(?P<layers>\d+))?"
    r"(?:_h(?:sz)?(?P<hidden>\d+))?(?:_(?:ahs|nh)(?P<heads>\d+))?(?:_(?P<case>" + _CASE + r"))?"
    r"(?P<rest>.*?)(?:_pretrain(?:_(?P<h2>\d+)_(?P<l2>\d+)_(?P<a2>\d+))?)?)_(?:rank)?(?P<node>\d{1,4})\.log\Z")
_TRIAL_DIR_RE = re.compile(r"[1-9]\d{0,6}\Z")

LOOKED_FOR = ("<N>n<G>g/<prefix>_b<B>_<fp32|fp16|amp>[_xla]_<trial>.log (DLPerf layout, e.g. 1n8g/bert_b32_fp32_1.log) "
              "or megatron_lm_perf_<N>n<G>g_dp<D>_mp<M>_pp<P>_mbs<m>_gbs<g>..._pretrain_<node>.log "
              "(or megatron_pretrain_gpt_<N>n<G>d_..._rank<node>.log)")


@dataclass(slots=True)
class LogFile:
    """One log file found in the tree."""

    relpath: str  # relative to the log dir (POSIX separators)
    node: int  # node rank this log belongs to


@dataclass(slots=True)
class TrialFiles:
    trial: Trial
    logs: dict[int, LogFile] = field(default_factory=dict)  # node rank -> file


def topology_from_path(rel: str) -> Topology | None:
    """The nearest ``<N>n<G>g`` directory above the file (the whole component, no trailing newline)."""
    for part in reversed(rel.split("/")[:-1]):
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


def _numbers(m: re.Match) -> dict:
    def num(*names):
        for n in names:
            if m[n]:
                return int(m[n])
        return None

    return {"dp": int(m["dp"]), "mp": int(m["mp"]), "pp": int(m["pp"]), "mbs": int(m["mbs"]), "gbs": int(m["gbs"]),
            "layers": num("layers", "l2"), "hidden": num("hidden", "h2"), "heads": num("heads", "a2")}


def _fits(layout: ParallelLayout, n: dict) -> bool:
    return ((layout.dp, layout.mp, layout.pp, layout.micro_batch, layout.global_batch) ==
            (n["dp"], n["mp"], n["pp"], n["mbs"], n["gbs"])
            and n["layers"] in (None, layout.num_layers) and n["hidden"] in (None, layout.hidden_size)
            and n["heads"] in (None, layout.num_heads))


def megatron_layout(suite, topo: Topology, m: re.Match, rel: str) -> tuple[ParallelLayout | None, str]:
    """(layout, "") or (None, why the file cannot be placed)."""
    n = _numbers(m)
    named = m["case"] or next((p for p in reversed(rel.split("/")[:-1]) if CASE_RE.match(p)), None)
    catalog = [lay for t, lay in (getattr(suite, "layouts", ()) or ()) if t == topo and _fits(lay, n)]
    if named:
        for lay in catalog:
            if lay.case == named:
                return lay, ""
        group = named.rsplit("_", 3)[0]
    elif len(catalog) == 1:
        return catalog[0], ""
    elif len(catalog) > 1:
        names = " and ".join(lay.case for lay in catalog)
        return None, (f"matches catalog cases {names}; name the case (a directory named after it, "
                      f"e.g. {catalog[0].case}/{topo.name}/1/<file>)")
    else:
        group = _layout_group(n["dp"], n["mp"], n["pp"])
    h, layers, a = n["hidden"] or 0, n["layers"] or 0, n["heads"] or 0
    case = named or f"{group}_{n['dp']}x{n['mp']}x{n['pp']}_{n['gbs']}_{h}x{layers}"
    kw = {"seq_length": int(m["seq"])} if m["seq"] else {}
    return ParallelLayout(group=group, case=case, dp=n["dp"], mp=n["mp"], pp=n["pp"], micro_batch=n["mbs"],
                          global_batch=n["gbs"], hidden_size=h, num_heads=a, num_layers=layers, **kw), ""


def is_megatron_style(suite) -> bool:
    """Suites whose logs are named the Megatron way (seed 002): parallel layouts / latency metric."""
    if getattr(suite, "layouts", None):
        return True
    try:
        return frameworks.get(suite.framework).metric_kind == MetricKind.LATENCY
    except KeyError:
        return False


def _trial_dir(rel: str) -> int:
    parts = rel.split("/")
    return int(parts[-2]) if len(parts) >= 2 and _TRIAL_DIR_RE.match(parts[-2]) else 1


def _place(rel: str, suite, window: Window, megatron: bool, batch_size_per_device: int | None,
           prefix: str | None, prefixes: dict) -> tuple[tuple | None, Trial | None, int, str]:
    """(trial key, trial, node, "") for a usable file, else (None, None, 0, why not)."""
    parent, _, name = rel.rpartition("/")
    m = TRIAL_FILE_RE.match(name)
    mm = MEGATRON_FILE_RE.match(name)
    if m and not mm:
        if megatron:
            return None, None, 0, f"DLPerf-style log, but suite {suite.id} reads Megatron logs (..._pretrain_<k>.log)"
        topo = topology_from_path(rel)
        if topo is None:
            return None, None, 0, "no <N>n<G>g directory above it"
        bz = int(m["bz"])
        if batch_size_per_device is not None and bz != batch_size_per_device:
            return None, None, 0, f"batch size {bz} != --batch-size-per-device {batch_size_per_device}"
        if prefix is not None and m["prefix"] != prefix:
            return None, None, 0, f"prefix {m['prefix']!r} != {prefix!r}"
        prefixes.setdefault(m["prefix"], rel)
        cell = Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision=_precision(m["prec"]),
                    batch_size_per_device=bz, topology=topo, xla=bool(m["xla"]), window=window,
                    accumulation=int(m["ga"]) if m["ga"] else None)
        trial = Trial(cell, int(m["trial"]))
        node = int(m["node"]) if m["node"] else 0
        return (parent, m["prefix"], cell, trial.index), trial, node, ""
    if not mm:
        return None, None, 0, "name does not match the DLPerf log naming"
    if not megatron:
        return None, None, 0, f"Megatron log, but suite {suite.id} is not a Megatron suite"
    topo = Topology(int(mm["nodes"]), int(mm["gpus"]))
    layout, why = megatron_layout(suite, topo, mm, rel)
    if layout is None:
        return None, None, 0, why
    cell = Cell(suite=suite.id, framework=suite.framework, model=suite.model, precision="amp",
                batch_size_per_device=layout.micro_batch, topology=topo, layout=layout, window=window)
    trial = Trial(cell, _trial_dir(rel))
    return (parent, cell, trial.index), trial, int(mm["node"]), ""


def discover(source_files: Iterable[str], suite, window: Window, batch_size_per_device: int | None = None,
             prefix: str | None = None) -> tuple[list[TrialFiles], list[tuple[str, str]], int]:
    """Group the files of a tree into trials. Returns (trials, skipped, files_seen).
    Raises :class:`ExtractError` for two files claiming the same node of one trial."""
    megatron = is_megatron_style(suite)
    trials: dict[tuple, TrialFiles] = {}
    skipped: list[tuple[str, str]] = []
    prefixes: dict[str, str] = {}  # prefix -> first file
    seen = 0
    for rel in source_files:
        seen += 1
        if not rel.endswith(".log"):
            continue
        key, trial, node, why = _place(rel, suite, window, megatron, batch_size_per_device, prefix, prefixes)
        if key is None or trial is None:
            skipped.append((rel, why))
            continue
        if node >= trial.cell.topology.nodes:
            skipped.append((rel, f"node {node} does not exist in a {trial.cell.topology.name} run"))
            continue
        tf = trials.setdefault(key, TrialFiles(trial))
        if node in tf.logs:
            raise ExtractError(f"two files for node {node} of trial {trial.id}: {tf.logs[node].relpath} and {rel}; "
                               "remove or rename one (e.g. fp16 and amp name the same precision)")
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
