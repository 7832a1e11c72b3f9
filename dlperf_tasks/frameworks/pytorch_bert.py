"""NGC PyTorch BERT-base pretraining (NVIDIA DeepLearningExamples ``run_pretraining.py``, seed 001).

Log format (global rank 0 only, dllogger ``StdOutBackend``; tqdm writes ``\\r`` progress
bars into the same file, so a DLL line may be glued after a bar fragment)::

    DLL 2020-09-24 03:15:18.714846 - Training Epoch: 0 Training Iteration: 25  average_loss : 10.5  step_loss : 10.5  learning_rate : 0.001

DLPerf rule (``extract_pytorch_logs_time.py``): count the ``Training Epoch:`` lines
whose step is > 5 (steps 1-5 are skipped); take the timestamps of the ``warmup``-th
and the ``warmup+measure``-th counted lines; speed = world x batch_per_device x
measure / (t_end - t_start), rounded to 2 decimals. dlperf counts **steps**, not lines
(``_lines.step_window``: a log with ``log_freq`` 50 covers 50 steps a line), and a
logged step is ``gradient_accumulation_steps`` micro-batches (read from the log's
``PARAMETER Config`` line, where DLE prints ``train_batch_size`` already divided by the
accumulation): samples per step = world x micro-batch x accumulation. DLE's own final
``training_sequences_per_second`` is kept beside it (flagged beyond 2 %). DLPerf's README invocation
``--warmup_batches 20 --train_batches 120`` is ``Window(warmup=20, measure=100)``
(start = 20th counted line = step 25, end = 120th = step 125); the script defaults
20/110 are ``Window(20, 90)``. A log therefore needs ``5 + window.total`` steps;
:meth:`launch` asks for ``window.total + 5`` optimizer steps (``max_iter``; 125 with the
default window): every step is ``accumulation`` micro-batches, so each extra step is costly.

Launching: one ``python3 -m torch.distributed.launch`` per node (launch_mode "per_node"), DLE's
phase-1 flags as seed 001 ran them: ``--train_batch_size`` = batch per device x accumulation (DLE
divides it by ``--gradient_accumulation_steps``), ``--allreduce_post_accumulation`` (+ ``_fp16``
with AMP) when accumulating, the BERT-base config shipped by the catalog.

Launcher settings: ``workdir`` (/workspace/examples/bert), ``script``
(run_pretraining.py), ``python`` (python3), ``master_port`` (29500), ``data_dir``
(input hdf5 dir), ``bert_config`` (catalog data file put on the nodes, passed as
``/dlperf/catalog/<file>`` or ``<node_files_dir>/<file>``), else ``config_file`` (a path; default
the repository's bert_config.json = BERT-large), ``output_dir`` (results/checkpoints),
``learning_rate`` (6e-3), ``warmup_proportion`` (0.2843), ``seed`` (42), ``max_iter`` (alias
``max_steps``; window.total+5), ``gradient_accumulation_steps`` (when the cell has none; 1),
``optimizer`` (lamb|adam: recorded, DLE has no flag), ``extra_args``, ``env``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dlperf_tasks.frameworks._launch import container_path
from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._precision import precision_problems
from dlperf_tasks.frameworks._lines import StepSpan, round2, step_window, window_problems
from dlperf_tasks.frameworks.base import Framework
from dlperf_tasks.frameworks.pytorch_bert_stream import SKIP_STEPS, PytorchBertStream, _stride
from dlperf_tasks.core.model import Cell, ParsedLog, Trial, TrialMetric, Window
from dlperf_tasks.frameworks.launchspec import LaunchSpec, NodeSpec

DEFAULT_DATA = ("/workspace/bert/data/hdf5_lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15"
                "_random_seed_12345_dupe_factor_5/wikicorpus_en/")


def max_iter(cell: Cell, settings: Mapping) -> int:
    """Optimizer steps of one trial (``--max_steps``; seed 001's ``max_iter``, which the Paddle
    benchmark sibling scripts pass as the trainer's iteration count). Default: just enough for the
    DLPerf rule (5 skipped steps + window), because every step is ``accumulation`` micro-batches."""
    need = cell.window.total + (SKIP_STEPS if cell.window.rule == "timestamps" else 0)
    default = settings.get("max_steps") if settings.get("max_steps") is not None else need
    return L.integer(settings, "max_iter", default, minimum=need)


def config_path(settings: Mapping, workdir: str) -> str:
    """``--config_file``: the catalog's data file on the node (``bert_config``), else ``config_file``,
    else the repository's ``bert_config.json`` (BERT-large at the pinned commit)."""
    if settings.get("bert_config"):
        return container_path(L.text(settings, "bert_config", ""), settings)
    return L.text(settings, "config_file", workdir.rstrip("/") + "/bert_config.json")


class PytorchBert(Framework):
    name = "pytorch_bert"
    log_framework = "ngc/pytorch"
    log_model = "bert"
    log_prefix = "bert-base-adam-training"
    launch_mode = "per_node"

    def launch(self, trial: Trial, node_rank: int, nodes: list[NodeSpec], settings: Mapping) -> LaunchSpec:
        cell = trial.cell
        topo = cell.topology
        L.check_nodes(nodes, node_rank, topo.nodes)
        settings = settings or {}
        workdir = L.text(settings, "workdir", "/workspace/examples/bert")
        acc = cell.accumulation if cell.accumulation is not None else L.integer(
            settings, "gradient_accumulation_steps", 1)
        steps = max_iter(cell, settings)
        if L.text(settings, "optimizer", "lamb") not in ("lamb", "adam"):
            raise CatalogError(f"launcher.optimizer must be lamb or adam, got {settings['optimizer']!r}")
        argv = [
            L.text(settings, "python", "python3"), "-m", "torch.distributed.launch",
            f"--nproc_per_node={topo.gpus_per_node}",
            "--nnodes", str(topo.nodes),
            f"--node_rank={node_rank}",
            f"--master_addr={nodes[0].address}",
            f"--master_port={L.integer(settings, 'master_port', 29500, 1, 65535)}",
            L.text(settings, "script", "run_pretraining.py"),
            f"--input_dir={L.text(settings, 'data_dir', DEFAULT_DATA)}",
            f"--output_dir={L.text(settings, 'output_dir', workdir.rstrip('/') + '/results/checkpoints')}",
            f"--config_file={config_path(settings, workdir)}",
            "--bert_model=bert-base-uncased",
            # DLE: --train_batch_size is the per-GPU batch of one optimizer step; the script divides it
            # by the accumulation steps to get the micro-batch (= the cell's batch size per device)
            f"--train_batch_size={cell.batch_size_per_device * acc}",
            "--max_seq_length=128",
            "--max_predictions_per_seq=20",
            f"--max_steps={steps}",
            f"--warmup_proportion={L.text(settings, 'warmup_proportion', '0.2843')}",
            f"--num_steps_per_checkpoint={max(1000, steps + 1)}",
            f"--learning_rate={L.text(settings, 'learning_rate', '6e-3')}",
            f"--seed={L.integer(settings, 'seed', 42, 0)}",
            f"--gradient_accumulation_steps={acc}",
        ]
        if cell.precision == "amp":
            argv.append("--fp16")
        if acc > 1:  # DLE's scripts/run_pretraining.sh (allreduce_post_accumulation{,_fp16}="true" for every
            # precision; seed 001's fp32 logs show both on); seed 001's "no GradAcc" runs set both false
            argv += ["--allreduce_post_accumulation", "--allreduce_post_accumulation_fp16"]
        argv += ["--do_train", "--json-summary", workdir.rstrip("/") + "/dllogger.json"]
        argv += L.str_list(settings, "extra_args")
        base_env = {"NCCL_DEBUG": "INFO"} if topo.nodes > 1 else {}
        if nodes[node_rank].interface:
            base_env["NCCL_SOCKET_IFNAME"] = nodes[node_rank].interface
        return LaunchSpec(argv=argv, env=L.env_from(settings, base_env), workdir=workdir)

    def log_relpath(self, trial: Trial, node_rank: int = 0) -> str:
        """The seeds' layout; cells with an accumulation parameter get ``_ga<N>`` before the trial
        index (``bert-base-adam-training_b32_fp32_ga1_1.log``) so "no GradAcc" logs stay apart."""
        path = super().log_relpath(trial, node_rank)
        acc = trial.cell.accumulation
        if acc is None:
            return path
        head, sep, tail = path.rpartition(f"_{trial.index}.")
        return f"{head}_ga{acc}{sep}{tail}"

    Stream = PytorchBertStream
    plausible_max_per_gpu = 20000.0

    def step_span(self, parsed: ParsedLog, cell: Cell, window: Window) -> StepSpan | None:
        if window.rule == "summary" or window.warmup < 1:
            return None
        return step_window(parsed.samples, parsed.facts.stride, window.warmup, window.total, SKIP_STEPS)

    def check(self, parsed: ParsedLog, cell: Cell, window: Window, span: StepSpan | None = None) -> list[str]:
        if window.rule == "summary":
            return summary_problems(parsed, cell, window)
        if window.warmup < 1:
            return [f"window warmup must be >= 1 for the timestamp rule (got {window.warmup})"]
        if not parsed.samples:
            return ["no 'DLL ... Training Epoch: E Training Iteration: N' line in the log"]
        reasons = args_vs_cell(parsed.facts, cell)
        return reasons + window_problems(parsed.samples, span or self.step_span(parsed, cell, window), window,
                                         after=f" after the first {SKIP_STEPS} steps")

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window,
                     span: StepSpan | None = None) -> TrialMetric:
        if window.rule == "summary":
            return summary_metric(parsed, cell)
        if window.warmup < 1:
            raise ValueError("pytorch_bert: window warmup must be >= 1 (run check() first)")
        start, end = span or self.step_span(parsed, cell, window)
        if start is None:
            raise ValueError(f"pytorch_bert: the log stops before step {end} (run check() first)")
        dt = end.value - start.value
        if dt <= 0:
            raise ValueError("pytorch_bert: non-increasing timestamps (run check() first)")
        per_step = samples_per_step(parsed.facts, cell)
        value = round2(per_step * (end.iteration - start.iteration) / dt)
        return TrialMetric(value=value, details=framework_figure_details(parsed.facts, value, per_step))


#: seed 001's rule cross-checks DLE's summary against the step timestamps: beyond this, the trial is invalid
SUMMARY_TOLERANCE = 0.05
#: step lines needed for the cross-check (the first one ends a step that includes the start-up)
CROSS_CHECK_LINES = 3


def timestamp_figure(parsed: ParsedLog, cell: Cell) -> float | None:
    """Samples/s from the step lines' timestamps (first to last line, skipped steps included as work),
    None with fewer than :data:`CROSS_CHECK_LINES` lines, no elapsed time, or when the log does not state
    its gradient accumulation (an excerpt without the ``PARAMETER Config`` line: the samples per step
    would be a guess, so the figures cannot be compared)."""
    s = parsed.samples
    if len(s) < CROSS_CHECK_LINES or parsed.facts.accumulation is None:
        return None
    first, last = s[0], s[len(s) - 1]
    dt = last.value - first.value
    if not dt > 0:
        return None
    return samples_per_step(parsed.facts, cell) * (last.iteration - first.iteration) / dt


def summary_problems(parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
    """``check()`` under seed 001's rule: DLE's summary line is there, the run did ``window.measure``
    optimizer steps, the run's arguments agree with the cell, and the step timestamps agree with the
    summary within :data:`SUMMARY_TOLERANCE`."""
    facts = parsed.facts
    out = args_vs_cell(facts, cell)
    if not parsed.samples:
        return out + ["no 'DLL ... Training Epoch: E Training Iteration: N' line in the log"]
    fig = facts.framework_figure
    if fig is None:
        out.append("no DLE summary line 'training_sequences_per_second : X' (the run did not finish; the "
                   "summary rule needs it; --speed-rule timestamps reads the step lines instead)")
        return out
    steps_done = max(parsed.samples.iteration) - facts.skipped_steps * _stride(facts)
    if steps_done < window.measure:
        out.append(f"the log ends at optimizer step {steps_done}, the rule needs {window.measure}")
    ts = timestamp_figure(parsed, cell)
    if ts is not None and math.isfinite(fig) and fig > 0:
        diff = (fig - ts) / ts
        if abs(diff) > SUMMARY_TOLERANCE:
            out.append(f"DLE training_sequences_per_second {fig:.2f} and the step timestamps' {ts:.2f} samples/s "
                       f"differ by {diff * 100:+.1f}% (more than {SUMMARY_TOLERANCE * 100:.0f}%)")
    return out


def summary_metric(parsed: ParsedLog, cell: Cell) -> TrialMetric:
    """Seed 001's figure: DLE's own ``training_sequences_per_second`` (total sequences / raw_train_time),
    rounded to 2 decimals; the timestamps' figure and the skipped steps beside it."""
    fig = parsed.facts.framework_figure
    if fig is None:
        raise ValueError("pytorch_bert: no training_sequences_per_second line (run check() first)")
    details: dict = {"rule": "summary", "samples_per_step": samples_per_step(parsed.facts, cell),
                     "framework_figure_name": parsed.facts.framework_figure_name}
    ts = timestamp_figure(parsed, cell)
    if ts is not None:
        details["timestamp_figure"] = round2(ts)
    else:
        details["flags"] = ["DLE's figure not cross-checked: " + (
            "the log states no gradient accumulation (no PARAMETER Config line)"
            if parsed.facts.accumulation is None else
            f"fewer than {CROSS_CHECK_LINES} step lines, or no time between the first and the last")]
    if parsed.facts.skipped_steps:
        details["skipped_steps"] = parsed.facts.skipped_steps
    if parsed.facts.final_loss is not None:
        details["final_loss"] = parsed.facts.final_loss
    return TrialMetric(value=round2(fig), details=details)


def cell_accumulation(cell: Cell) -> int | None:
    """The cell's gradient accumulation steps (catalog field), None when the cell does not say."""
    acc = getattr(cell, "gradient_accumulation_steps", None)
    return int(acc) if acc else None


def samples_per_step(facts, cell: Cell) -> int:
    """Samples per logged (optimizer) step over all GPUs: world x micro-batch x accumulation."""
    acc = facts.accumulation or cell_accumulation(cell) or 1
    return cell.topology.world_size * cell.batch_size_per_device * acc


def args_vs_cell(facts, cell: Cell) -> list[str]:
    """Reasons where the run's own arguments (read from the log) disagree with the cell."""
    out = []
    src = f" ({facts.args_source})" if facts.args_source else ""
    if facts.batch_per_device is not None and facts.batch_per_device != cell.batch_size_per_device:
        out.append(f"log's batch size per GPU is {facts.batch_per_device}{src}, the cell's is "
                   f"{cell.batch_size_per_device}")
    acc = cell_accumulation(cell)
    if facts.accumulation is not None and acc is not None and facts.accumulation != acc:
        out.append(f"log's gradient accumulation is {facts.accumulation}{src}, the cell's is {acc}")
    if facts.world_size is not None and facts.world_size != cell.topology.world_size:
        out.append(f"log's world size is {facts.world_size}{src}, the cell's is "
                   f"{cell.topology.world_size} ({cell.topology.name})")
    return out + precision_problems("dle", facts, cell)


def framework_figure_details(facts, value: float, per_step: int) -> dict:
    """The framework's own throughput figure next to dlperf's, flagged beyond 2 %."""
    details: dict = {"samples_per_step": per_step}
    if facts.final_loss is not None:
        details["final_loss"] = facts.final_loss
    fig = facts.framework_figure
    if fig is not None and value > 0:
        diff = (fig - value) / value
        details.update(framework_figure=fig, framework_figure_name=facts.framework_figure_name,
                       framework_disagreement=round(diff, 4))
        if abs(diff) > DISAGREE:
            details["flags"] = [f"{facts.framework_figure_name} = {fig:.2f} differs from dlperf's "
                                f"{value:.2f} by {diff * 100:+.1f}% (> {DISAGREE * 100:.0f}%)"]
    return details


#: a framework's own throughput figure further than this from dlperf's is flagged
DISAGREE = 0.02
