"""MXNet BERT-base pretraining (gluon-nlp ``scripts/bert/run_pretraining.py``, seed 000).

Log format (every rank prints one line per step, no rank prefix unless mpirun ran
with ``--tag-output``)::

    INFO:root:[step 101]\\tmlm_loss=7.38695\\tnsp_loss= 0.72\\tthroughput=16.0K tks/s\\tlr=0.0000505 time=0.24, latency=240.6 ms/batch

Other versions of ``run_pretraining.py`` (2019-2020) add ``mlm_acc``/``nsp_acc``, print
``latency=... ms/step``, or print no ``latency=`` at all: then the latency is
``time`` (seconds over ``log_interval`` steps, ``{:.2f}``) x 1000 / ``log_interval`` from the
Namespace line (refused, with the reason, when there is none).

DLPerf rule (``MxNet/BERT/extract_mxnet_logs.py``): per line speed =
1000 / latency x batch_per_device x world (a global samples/s value); per step the
median over the ranks; the trial speed is the mean of steps ``warmup+1 ..
warmup+measure``, rounded to 2 decimals. DLPerf ran 120 steps and dropped 20; the
fixtures run 200 steps and are read with window 100/100.

Launching (``launch_mode = "mpi"``): one ``mpirun`` on node 0 starts every rank through
the containers' sshd, as DLPerf's ``pretrain.sh`` did.

Launcher settings (all optional; see docs/TEAM_NOTES.md for the common keys):
``workdir`` (/workspace/gluon-nlp/scripts/bert), ``script`` (run_pretraining.py),
``python`` (python3), ``mpirun`` (mpirun), ``ssh_port`` (port of the containers' sshd
for ``-mca plm_rsh_args``, default 22), ``data`` (comma-separated .npy shards or
shell patterns, expanded by gluon-nlp's ``nlp.utils.glob``; default ``<data_dir>/*``: every file, as
DLPerf's pretrain.sh passes them), ``data_dir`` (/datasets/bert/mxnet/wiki_128_npy_part_0),
``model`` (bert_12_768_12), ``lr`` (1e-4), ``mpi_export`` (extra env var names passed
with ``-x``), ``mpi_args`` (extra mpirun words), ``extra_args`` (extra script words),
``env`` (NAME: value set for mpirun and exported to every rank).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks import _native
from dlperf_tasks.frameworks._precision import precision_problems
from dlperf_tasks.frameworks._lines import StepSpan, fmt_list, parse_float, round2, strip_tag
from dlperf_tasks.frameworks._stream import LogStream, as_int, kv_args, kv_pattern
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.core.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window
from dlperf_tasks.core.samples import LazyFloats
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

_STEP = re.compile(r"\[step (\d+)\]")
_LATENCY = re.compile(r"latency=\s*(\S+?)\s*ms/(?:batch|step)")
#: ``time={:.2f}`` (seconds over ``log_interval`` steps) of the versions that print no ``latency=``
_TIME = re.compile(r"\btime=\s*([^\s,]+)")

#: environment variables every rank needs (DLPerf: -x NCCL_DEBUG -x LD_LIBRARY_PATH -x PATH)
MPI_EXPORTS = ("NCCL_DEBUG", "LD_LIBRARY_PATH", "PATH")


def build_mpirun(
    trial: Trial,
    nodes: list[NodeSpec],
    settings: Mapping,
    script_argv: list[str],
    env: dict[str, str],
) -> list[str]:
    """The ``mpirun`` argv shared by the MXNet workloads (Horovod over OpenMPI)."""
    topo = trial.cell.topology
    gpus = topo.gpus_per_node
    if topo.nodes == 1:
        hosts = f"localhost:{gpus}"
    else:
        hosts = ",".join(f"{n.address}:{gpus}" for n in nodes)
    ssh_port = L.integer(settings, "ssh_port", 22, 1, 65535)
    argv = [
        L.text(settings, "mpirun", "mpirun"),
        "--allow-run-as-root",
        "-np", str(topo.world_size),
        "-H", hosts,
        "-bind-to", "none",
        "-map-by", "slot",
    ]
    exports: list[str] = []
    for name in list(MPI_EXPORTS) + sorted(env) + L.env_names(settings, "mpi_export"):
        if name not in exports:
            exports.append(name)
    for name in exports:
        argv += ["-x", name]
    argv += [
        "-mca", "pml", "ob1",
        "-mca", "btl", "^openib",
        "-mca", "plm_rsh_args", f"-p {ssh_port} -q -o StrictHostKeyChecking=no",
    ]
    iface = nodes[0].interface if nodes else None
    if iface:
        argv += ["-mca", "btl_tcp_if_include", iface]
    argv += L.str_list(settings, "mpi_args")
    return argv + script_argv


class MxnetBert(Framework):
    name = "mxnet_bert"
    log_framework = "mxnet"
    log_model = "bert"
    log_prefix = "bert_base"
    launch_mode = "mpi"

    # ---- launching -------------------------------------------------------
    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        L.check_nodes(nodes, node_rank, cell.topology.nodes)
        if node_rank != 0:
            raise ValueError("mxnet_bert is launched by one mpirun on node 0 (launch_mode 'mpi')")
        settings = settings or {}
        bsz = cell.batch_size_per_device
        total_bz = bsz * cell.topology.world_size
        data_dir = L.text(settings, "data_dir", "/datasets/bert/mxnet/wiki_128_npy_part_0")
        # DLPerf's pretrain.sh passes every file of DATA_DIR (comma-joined); gluon-nlp 7b7bf60 expands
        # --data itself (nlp.utils.glob: comma-separated shell patterns) and asserts files >= workers
        data = L.text(settings, "data", data_dir.rstrip("/") + "/*")
        dtype = "float16" if cell.precision == "amp" else "float32"
        script = [
            L.text(settings, "python", "python3"),
            L.text(settings, "script", "run_pretraining.py"),
            "--model", L.text(settings, "model", "bert_12_768_12"),
            "--dtype", dtype,
            "--warmup_ratio", "1",
            "--comm_backend", "horovod",
            "--total_batch_size", str(total_bz),
            "--total_batch_size_eval", str(total_bz),
            "--accumulate", "1",
            "--lr", L.text(settings, "lr", "1e-4"),
            "--max_seq_length", "128",
            "--max_predictions_per_seq", "20",
            "--num_steps", str(cell.window.total),
            "--log_interval", "1",
            "--ckpt_interval", "1000",
            "--no_compute_acc",  # DLPerf's pretrain.sh: no accuracy metrics every step (seed 000: CPU-bound)
            "--data", data,
        ] + L.str_list(settings, "extra_args")
        env = L.env_from(settings, {"NCCL_DEBUG": "INFO"})
        argv = build_mpirun(trial, nodes, settings, script, env)
        return LaunchSpec(argv=argv, env=env, workdir=L.text(settings, "workdir", "/workspace/gluon-nlp/scripts/bert"))

    def expected_ranks(self, cell: Cell) -> list[int]:
        return list(range(cell.topology.world_size))

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        reasons: list[str] = self.args_problems(parsed, cell)
        world = cell.topology.world_size
        per_step = parsed.extra.get("lines_per_step") or Counter(s.iteration for s in parsed.samples)
        if not per_step:
            return ["no '[step N] ... latency=... ms/batch' line in the log"]
        need = _needed_steps(per_step, window.total, parsed.facts.stride)
        present = [i for i in need if per_step.get(i)]
        if len(present) < len(need):
            missing = [i for i in need if not per_step.get(i)]
            reasons.append(
                f"only {len(present)} of {window.total} iterations ({len(need)} logged steps expected; last step seen {max(per_step)}; "
                f"missing steps {fmt_list(missing)})")
        # ranks: by tag when mpirun tagged the output, else by line count per step
        if parsed.facts.ranks_seen:
            for r in sorted(set(self.expected_ranks(cell)) - set(parsed.facts.ranks_seen))[:8]:
                reasons.append(f"rank {r} printed no iteration line")
        short = [(i, per_step[i]) for i in present if per_step[i] != world]
        if short:
            i, c = short[0]
            more = f" (and {len(short) - 1} more steps)" if len(short) > 1 else ""
            reasons.append(f"step {i} has {c} of {world} rank lines{more}")
        return reasons

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> TrialMetric:
        world = cell.topology.world_size
        bsz = cell.batch_size_per_device
        medians = _median_speeds(parsed.samples, window.warmup, window.total, 1000.0 * bsz * world)
        steps = [i for i in _needed_steps(medians, window.total, parsed.facts.stride) if i > window.warmup]
        missing = [i for i in steps if i not in medians]
        if not steps:
            raise ValueError("mxnet_bert: no logged step inside the window (run check() first)")
        if missing:
            raise ValueError(f"mxnet_bert: steps {fmt_list(missing)} have no latency (run check() first)")
        rows = [medians[i] for i in steps]
        return TrialMetric(value=round2(sum(rows) / len(rows)))

    plausible_max_per_gpu = 20000.0

    def args_problems(self, parsed: ParsedLog, cell: Cell) -> list[str]:
        """The Namespace line's batch and accumulation against the cell."""
        f = parsed.facts
        out = []
        want_total = cell.batch_size_per_device * cell.topology.world_size
        if f.global_batch is not None and f.global_batch != want_total:
            out.append(f"log's total_batch_size is {f.global_batch} (gluon-nlp Namespace line), the cell's is "
                       f"{want_total} ({cell.batch_size_per_device} x {cell.topology.world_size} GPUs)")
        acc = getattr(cell, "gradient_accumulation_steps", None) or 1
        if f.accumulation is not None and f.accumulation != acc:
            out.append(f"log's accumulate is {f.accumulation} (gluon-nlp Namespace line), the cell's is {acc}")
        return out + precision_problems("mxnet", f, cell)


def _needed_steps(per_step, total: int, stride: int | None) -> list[int]:
    """The steps a log must hold up to ``total``: every step, or every ``stride``-th from the first
    logged one when the run logged every ``log_interval`` steps (counted in steps, not lines)."""
    stride = max(int(stride or 1), 1)
    first = min(per_step) if stride > 1 and per_step else 1
    return list(range(first, total + 1, stride))


def _speeds_by_step(samples, lo: int, hi: int, k: float) -> dict[int, list[float]]:
    """step -> ``k / latency`` of each of its lines, for ``lo < step <= hi`` (read from the columns).
    Steps in log order (every rank prints step N before N+1, the usual case): the window is found
    by bisection and each step's lines are one slice, so the cost is per step, not per line."""
    its, vals = samples.iteration, samples.value
    if its and all(map(operator.le, its, itertools.islice(its, 1, None))):
        a, b = bisect.bisect_right(its, lo), bisect.bisect_right(its, hi)
        speeds: dict[int, list[float]] = {}
        while a < b:
            step = its[a]
            end = bisect.bisect_right(its, step, a, b)
            speeds[step] = [k / v for v in vals[a:end]]
            a = end
        return speeds
    speeds = defaultdict(list)
    for i, v in zip(its, vals):
        if lo < i <= hi:
            speeds[i].append(k / v)
    return speeds


def _median_speeds(samples, lo: int, hi: int, k: float) -> dict[int, float]:
    """step -> ``statistics.median`` of the ``k / latency`` of its lines, for ``lo < step <= hi``.

    Steps in log order, every latency > 0 and finite, ``k`` > 0 (the usual case): ``k / v`` falls as
    ``v`` grows (IEEE division is monotonic), so the median's one or two middle values are ``k`` over
    the middle latencies: one sort of the latencies, one or two divisions a step, the same doubles
    (``a + b`` is commutative). Anything else: :func:`_speeds_by_step` and ``statistics.median``."""
    its, vals = samples.iteration, samples.value
    if k > 0 and its and all(map(operator.le, its, itertools.islice(its, 1, None))):
        a, b = bisect.bisect_right(its, lo), bisect.bisect_right(its, hi)
        window = vals[a:b]
        if window and min(window) > 0 and math.isfinite(sum(window)):  # no NaN, no inf: then min is right
            out: dict[int, float] = {}
            while a < b:
                step = its[a]
                end = bisect.bisect_right(its, step, a, b)
                s = sorted(vals[a:end])
                m = len(s) // 2
                out[step] = k / s[m] if len(s) % 2 else (k / s[m - 1] + k / s[m]) / 2
                a = end
            return out
    return {step: statistics.median(v) for step, v in _speeds_by_step(samples, lo, hi, k).items()}


class MxnetBertStream(LogStream):
    """gluon-nlp ``run_pretraining.py`` log: ``[step N]`` lines of every rank, the Namespace line."""

    _last_loss: float | None = None  # mlm + nsp of the last step line that has both

    def scan(self, block: str) -> str | None:
        scan = _native.mxbert_scan
        cols = scan(block) if scan is not None else None  # None: not ASCII, an odd value or line
        removed = ""
        if cols is None:  # the regexes below read the block: never an odd step line (linear time)
            block, removed = self.drop_odd_step_lines(block, "[step ", "latency=")
            parts = _BULK.split(block)  # first: the checks below then read only the text between step lines
            rest = "".join(parts[0::5]) if len(parts) > 1 else block
        else:
            rest = cols[0]
        if "Namespace(" in rest:  # before the step lines: its log_interval turns a 'time=' into ms per step
            for _, line in self.lines_with(rest, "Namespace("):
                self._namespace(line)
                if self.fc.facts.args_source:  # every rank prints it: the first one is enough
                    break
        tagged = "]<std" in rest  # mpirun --tag-output prefixes (at line starts: never inside a step line)
        if tagged:
            out = None
        elif cols is None:
            out = self._bulk(parts, rest)
        else:
            out = self._columns(*cols)
        if out is None:
            hits = self._each(block, tagged)
            if hits != block.count("throughput="):
                self._slow(block, {m.start() for m in _FAST.finditer(block)})
        return out + removed if out is not None and removed else out

    def _bulk(self, parts: list[str], rest: str) -> str | None:
        """Untagged block, every value well-formed: one ``re.split`` (:data:`_BULK`) gave the columns
        and the text between step lines; whole columns are converted at C speed (``map``) instead
        of a Python loop per line. Returns that in-between text (the crash-marker scan reads only
        it), or None to fall back to :meth:`_each`: a ``throughput=`` line the split did not take
        (other field order, a loss that is not a plain decimal: nan, inf, an exponent, garbage)."""
        if (len(parts) - 1) // 5 == 0 or "throughput=" in rest:
            return self._columns(rest, rest, [], [], "", "", [])
        try:
            steps = list(map(int, parts[1::5]))
            lats = list(map(float, parts[4::5]))
        except ValueError:
            return None
        if not (min(lats) > 0 and sum(lats) < math.inf):
            return None  # a bad latency: the line-by-line path says which
        clean = rest.replace("INFO:root:", "") if "INFO:root:" in rest else rest  # python logging's prefix
        return self._columns(rest, clean, steps, lats, "\n".join(parts[2::5]), "\n".join(parts[3::5]), steps)

    def _columns(self, rest: str, clean: str, steps: list[int], lats: list[float], mlm: str, nsp: str,
                 runs: list[int]) -> str | None:
        """The columns of a block's step lines (:meth:`_bulk`'s, or the C scanner's ``_native.mxbert_scan``:
        the same values, latencies > 0 with a finite sum, ``mlm``/``nsp`` the loss texts joined by
        newlines). ``clean``: ``rest`` without python logging's ``INFO:root:`` prefixes (what the
        crash-marker scan reads); ``runs``: the steps or any list of the same set (fewer to add)."""
        if "throughput=" in rest:
            return None
        n = len(steps)
        if not n:
            return rest
        # plain decimals (the split took nothing else): the losses (mlm + nsp) are converted only
        # if someone reads them
        self.samples.add_columns(steps, lats, "ms/iter", loss=LazyFloats(n, operator.add, mlm, nsp))
        self._last_loss = float(mlm[mlm.rfind("\n") + 1:]) + float(nsp[nsp.rfind("\n") + 1:])
        self.fc._iters.update(runs)
        top = max(runs)
        if self.max_iteration is None or top > self.max_iteration:
            self.max_iteration = top
        return clean

    def _each(self, block: str, tagged: bool) -> int:
        samples, iters, ranks = self.samples, self.fc._iters, self.fc._ranks
        hits = 0
        top = self.max_iteration if self.max_iteration is not None else -1
        for m in _FAST.finditer(block):
            step_s, mlm_s, nsp_s, lat_s = m.groups()
            step = int(step_s)
            try:
                lat = float(lat_s)
            except ValueError:
                lat = -1.0
            if not 0.0 < lat < math.inf:
                self.fc.error(f"line {self.line_no(block, m.start())}: step {step} latency {lat_s!r} is not "
                              "a positive finite number")
                continue
            rank = None
            if tagged:
                start = block.rfind("\n", 0, m.start()) + 1
                rank = self.rank_at(block, start)
                if rank is not None:
                    ranks.add(rank)
            try:
                loss = float(mlm_s) + float(nsp_s)
            except ValueError:
                loss = None
            if loss is not None:
                self._last_loss = loss
                if not -math.inf < loss < math.inf:
                    self.nonfinite_loss(step, "mlm_loss + nsp_loss", f"{mlm_s} + {nsp_s}")
            samples.append(Sample(step, lat, "ms/iter", rank, None, None, loss))
            iters.add(step)
            hits += 1
            if step > top:
                top = step
        if top >= 0:
            self.max_iteration = top
        return hits

    def _slow(self, block: str, hits: set[int]) -> None:
        """``[step`` lines the fast regex did not read (other field order, a garbled value)."""
        for start, line in self.lines_with(block, "[step "):
            if start + line.find("[step ") in hits or "throughput=" not in line:
                continue
            rank, text = strip_tag(line)
            where = f"line {self.line_no(block, start)}"
            m = _STEP.search(text)
            if not m:
                self.fc.error(f"{where}: iteration line without a step number: {text[:120]!r}")
                continue
            step = int(m.group(1))
            lm = _LATENCY.search(text)
            if lm is None and "latency=" in text:  # a latency field cut or mangled: never fall back to time=
                self.fc.error(f"{where}: step {step} line has an unreadable 'latency=' field: {text[:120]!r}")
                continue
            lm = lm or _TIME.search(text)
            interval = self.fc.facts.stride
            if not lm or (lm.re is _TIME and not interval):
                why = " and no Namespace log_interval to turn its 'time=' into ms per step" if lm else ""
                self.fc.error(f"{where}: step {step} line has no 'latency=... ms/batch'{why}: {text[:120]!r}")
                continue
            lat = parse_float(lm.group(1))
            if lat is not None and lm.re is _TIME:  # seconds over log_interval steps (gluon-nlp without latency=)
                lat = lat * 1000.0 / interval
            if lat is None or lat <= 0:
                self.fc.error(f"{where}: step {step} latency {lm.group(1)!r} is not a positive finite number")
                continue
            self.add(Sample(iteration=step, value=lat, unit="ms/iter", rank=rank))

    def _namespace(self, line: str) -> None:
        if self.fc.facts.args_source:  # every rank prints it: the first one is enough
            return
        keep = kv_args(line[line.index("Namespace("):], _NAMESPACE_KEYS)
        f = self.fc.facts
        if not keep:
            return
        f.args.update(keep)
        f.args_source = "gluon-nlp Namespace line"
        f.global_batch = as_int(keep.get("total_batch_size"))
        f.accumulation = as_int(keep.get("accumulate"))
        f.stride = as_int(keep.get("log_interval")) or f.stride

    def finish(self) -> None:
        its = self.samples.iteration
        self.extra["lines_per_step"] = dict(Counter(its))
        self.extra["tagged"] = bool(self.fc._ranks)
        if self._last_loss is not None:  # the last loss printed
            self.fc.facts.final_loss = self._last_loss


#: a plain decimal (then ``float`` cannot fail and the value is finite; anything else goes line by line)
_PLAIN = r"-?[0-9]++(?:\.[0-9]++)?+"  # [0-9], not \d: a charset test is cheaper in ``re`` (and ASCII only)
#: possessive ``*+``/``++`` where giving characters back can never lead to a match (``\S`` then
#: ``\s``: the same text, ~35 % less time in ``re.split``); the latency keeps ``\S+`` that may give
#: back (``250.1ms/batch`` without a space still matches)
_FAST = re.compile(r"\[step (\d++)\]\s*+mlm_loss=\s*+(\S++)\s++nsp_loss=\s*+(\S++)\s++throughput=[^\n]*"
                   r"latency=\s*+(\S+)\s*ms/batch")
#: the bulk path's split: :data:`_FAST` whose losses are plain decimals (no ``fullmatch`` pass afterwards)
_BULK = re.compile(r"\[step ([0-9]++)\]\s*+mlm_loss=\s*+(" + _PLAIN + r")\s++nsp_loss=\s*+(" + _PLAIN + r")\s++"
                   r"throughput=[^\n]*latency=\s*+(\S+)\s*ms/batch")


_NAMESPACE_KEYS = kv_pattern("total_batch_size", "accumulate", "log_interval", "num_steps", "dtype", "no_compute_acc",
                             "model", "batch_size")

MxnetBert.Stream = MxnetBertStream
