"""NGC PyTorch BERT-base pretraining (NVIDIA DeepLearningExamples ``run_pretraining.py``, seed 001).

Log format (global rank 0 only, dllogger ``StdOutBackend``; tqdm writes ``\\r`` progress
bars into the same file, so a DLL line may be glued after a bar fragment)::

    DLL 2020-09-24 03:15:18.714846 - Training Epoch: 0 Training Iteration: 25  average_loss : 10.5  step_loss : 10.5  learning_rate : 0.001

DLPerf rule (``extract_pytorch_logs_time.py``): count the ``Training Epoch:`` lines
whose step is > 5 (steps 1-5 are skipped); take the timestamps of the ``warmup``-th
and the ``warmup+measure``-th counted lines; speed = world x batch_per_device x
measure / (t_end - t_start), rounded to 2 decimals. DLPerf's README invocation
``--warmup_batches 20 --train_batches 120`` is ``Window(warmup=20, measure=100)``
(start = 20th counted line = step 25, end = 120th = step 125); the script defaults
20/110 are ``Window(20, 90)``. A log therefore needs ``5 + window.total`` steps;
:meth:`launch` asks for ``window.total + 30`` (150 with the default window, as DLPerf).

Launching: one ``python3 -m torch.distributed.launch`` per node (launch_mode "per_node").

Launcher settings: ``workdir`` (/workspace/examples/bert), ``script``
(run_pretraining.py), ``python`` (python3), ``master_port`` (29500), ``data_dir``
(input hdf5 dir), ``config_file`` (bert_config.json), ``output_dir``
(results/checkpoints), ``learning_rate`` (6e-3), ``max_steps`` (window.total+30),
``extra_args``, ``env``.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Iterable, Mapping

from dlperf_tasks.frameworks import _launch as L
from dlperf_tasks.frameworks._lines import FactCollector, round2, split_lines, strip_tag
from dlperf_tasks.frameworks.base import Framework, LaunchSpec, NodeSpec
from dlperf_tasks.model import Cell, ParsedLog, Sample, Trial, TrialMetric, Window

_DLL = re.compile(
    r"DLL (\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))? - "
    r"Training Epoch: (\d+) Training Iteration: (\d+)\b")
#: DLPerf skips steps 1..SKIP_STEPS
SKIP_STEPS = 5
DEFAULT_DATA = ("/workspace/bert/data/hdf5_lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15"
                "_random_seed_12345_dupe_factor_5/wikicorpus_en/")


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
        steps = L.integer(settings, "max_steps", cell.window.total + 30, minimum=cell.window.total + SKIP_STEPS)
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
            f"--config_file={L.text(settings, 'config_file', workdir.rstrip('/') + '/bert_config.json')}",
            "--bert_model=bert-base-uncased",
            f"--train_batch_size={cell.batch_size_per_device}",
            "--max_seq_length=128",
            "--max_predictions_per_seq=20",
            f"--max_steps={steps}",
            "--warmup_proportion=1",
            "--num_steps_per_checkpoint=1000",
            f"--learning_rate={L.text(settings, 'learning_rate', '6e-3')}",
            "--seed=42",
        ]
        if cell.precision == "amp":
            argv.append("--fp16")
        argv += ["--do_train", "--json-summary", workdir.rstrip("/") + "/dllogger.json"]
        argv += L.str_list(settings, "extra_args")
        base_env = {"NCCL_DEBUG": "INFO"} if topo.nodes > 1 else {}
        if nodes[node_rank].interface:
            base_env["NCCL_SOCKET_IFNAME"] = nodes[node_rank].interface
        return LaunchSpec(argv=argv, env=L.env_from(settings, base_env), workdir=workdir)

    def parse(self, lines: Iterable[str]) -> ParsedLog:
        fc = FactCollector()
        samples: list[Sample] = []
        for n, raw in enumerate(split_lines(lines), 1):
            fc.line(raw)
            rank, text = strip_tag(raw)
            if "Training Epoch: " not in text:
                continue
            m = _DLL.search(text)
            if not m:
                fc.error(f"line {n}: 'Training Epoch:' line without a readable DLL timestamp/step: {text[:120]!r}")
                continue
            y, mo, d, h, mi, s = (int(x) for x in m.group(1, 2, 3, 4, 5, 6))
            frac = m.group(7) or "0"
            try:
                ts = _dt.datetime(y, mo, d, h, mi, s, int(frac.ljust(6, "0"))).replace(
                    tzinfo=_dt.timezone.utc).timestamp()
            except ValueError:
                fc.error(f"line {n}: invalid timestamp in {text[:80]!r}")
                continue
            step = int(m.group(9))
            fc.iteration(step, 0 if rank is None else rank)
            samples.append(Sample(iteration=step, value=ts, unit="s", rank=rank, timestamp=ts))
        return ParsedLog(samples=samples, facts=fc.finish())

    @staticmethod
    def _counted(parsed: ParsedLog) -> list[Sample]:
        """The lines DLPerf counts: file order, steps > 5."""
        return [s for s in parsed.samples if s.iteration > SKIP_STEPS]

    def check(self, parsed: ParsedLog, cell: Cell, window: Window) -> list[str]:
        if window.warmup < 1:
            return [f"window warmup must be >= 1 for the timestamp rule (got {window.warmup})"]
        counted = self._counted(parsed)
        if not parsed.samples:
            return ["no 'DLL ... Training Epoch: E Training Iteration: N' line in the log"]
        reasons = []
        if len(counted) < window.total:
            last = max(s.iteration for s in parsed.samples)
            reasons.append(
                f"only {len(counted)} of {window.total} iterations after the first {SKIP_STEPS} "
                f"(last step seen {last}, need step {window.total + SKIP_STEPS})")
            return reasons
        start, end = counted[window.warmup - 1], counted[window.total - 1]
        if end.value - start.value <= 0:
            reasons.append(f"timestamps do not increase between step {start.iteration} and step {end.iteration}")
        return reasons

    def trial_metric(self, parsed: ParsedLog, cell: Cell, window: Window) -> TrialMetric:
        counted = self._counted(parsed)
        if len(counted) < window.total or window.warmup < 1:
            raise ValueError(f"pytorch_bert: only {len(counted)} counted steps, need {window.total} (run check() first)")
        dt = counted[window.total - 1].value - counted[window.warmup - 1].value
        if dt <= 0:
            raise ValueError("pytorch_bert: non-increasing timestamps (run check() first)")
        world = cell.topology.world_size
        return TrialMetric(value=round2(world * cell.batch_size_per_device * window.measure / dt))
