"""Seed 001's table reproduced from seed 001's own logs with ``dlperf extract`` defaults.

The logs are PaddlePaddle/Perf@a26f15017270b3c67ad36edb66e7038ad853b179 ``Bert/OtherReports/PyTorch/logs``
(tests/data/genuine_logs/README.md); the table is that commit's ``Bert/OtherReports/PyTorch/README.md``
("四、测试结果"), which is seed 001's. Rule: DLE's final ``training_sequences_per_second`` of each run,
cross-checked against the step timestamps. The fp16 logs hold overflow-skipped optimizer steps (the same
step number five times, rising timestamps): valid; a restarted or concatenated log is still refused."""

from __future__ import annotations

import json

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.cli import main
from dlperf_tasks.measure.extract import extract_tree
from tests.unit.genuine_corpus import entries, lay_out, read

#: seed 001's table (sequences/s): GPUs -> FP32 BS=32, FP32 BS=48, AMP BS=64, AMP BS=96
SEED_001 = {1: (127.09, 126.48, 511.13, 532.24), 8: (1018.40, 1012.80, 4063.19, 4207.36),
            32: (3994.1, 3974.0, 15941.1, 16311.6)}
SEED_001_NO_GRADACC = (2836.7, 3180.0, 10391.2, 12061.6)  # the table's "32 [W/O AccGrad]" row
COLUMNS = (("fp32", 32), ("fp32", 48), ("amp", 64), ("amp", 96))
SEED_LOGS = [e for e in entries() if "paddle_perf_a26f150" in e["file"]]


@pytest.fixture
def tree(tmp_path):
    for e in SEED_LOGS:
        lay_out(e, tmp_path / "logs")
    return tmp_path / "logs"


def test_seed_001_table_from_its_own_logs_with_extract_defaults(tree, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["extract", "--suite", "pytorch-bert", "--log-dir", str(tree), "--format", "dlperf",
                 "--output", str(out), "--quiet"]) == 0
    assert "invalid" not in capsys.readouterr().out
    cells = json.loads(out.read_text())["cells"]
    got = {(c["precision"], c["batch_size_per_device"], c["gpus"], c["cell"].get("accumulation")): c["median_speed"]
           for c in cells}
    assert all(c["n_valid"] == 1 and c["n_invalid"] == 0 for c in cells)
    for gpus, row in SEED_001.items():
        for (prec, bs), want in zip(COLUMNS, row):
            digits = 2 if gpus < 32 else 1  # the README prints the 32-GPU row to one decimal
            assert round(got[(prec, bs, gpus, None)], digits) == want, (prec, bs, gpus)
    for (prec, bs), want in zip(COLUMNS, SEED_001_NO_GRADACC):
        assert round(got[(prec, bs, 32, 1)], 1) == want
    # the 8 one-node figures are the suite's own cells: 4n8g and 1n8g against 1n1g give speedups
    sp = {(c["precision"], c["batch_size_per_device"], c["gpus"]): c["speedup"] for c in cells
          if c["cell"].get("accumulation") is None}
    assert sp[("fp32", 32, 8)] == round(1018.40 / 127.09, 2)


def test_overflow_skipped_steps_are_work_not_a_restart(tree):
    res = extract_tree(load_suite("pytorch-bert"), tree)
    fp16 = [t for t in res.trials if t.trial.cell.precision == "amp" and t.trial.cell.topology.name == "1n1g"]
    assert len(fp16) == 2 and all(t.valid for t in fp16), [t.reason for t in fp16]
    for t in fp16:  # five "Training Iteration: 0" lines: four repeats, each one more step of samples
        assert t.metric.details["skipped_steps"] == 4
        # the timestamps (8 intervals of 67584 sequences) agree with DLE's figure within 0.5 %
        assert abs(t.metric.details["timestamp_figure"] - t.metric.value) / t.metric.value < 0.005


def _one(tmp_path, text: bytes):
    log = tmp_path / "1n1g" / "bert-base-adam-training_b64_fp16_1.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(text)
    (trial,) = extract_tree(load_suite("pytorch-bert"), tmp_path).trials
    return trial


def test_a_concatenated_log_is_still_refused(tmp_path):
    (e,) = [e for e in SEED_LOGS if e["as"] == "1n1g/bert-base-adam-training_b64_fp16_1.log"]
    trial = _one(tmp_path, read(e) + read(e))
    assert not trial.valid
    assert "second 'PARAMETER Config' start-up banner" in trial.reason
    assert "iteration logged twice" in trial.reason


def test_steps_going_back_after_progress_are_refused(tmp_path):
    """The step lines of a run restarted from step 1 after step 3 (banner lines removed): the numbers go
    back after progress, which no skipped step does."""
    (e,) = [e for e in SEED_LOGS if e["as"] == "1n1g/bert-base-adam-training_b32_fp32_1.log"]
    lines = read(e).decode().splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines) if "Training Iteration: " in line]
    text = "".join(lines[:steps[2] + 1] + [lines[i] for i in steps[:2]] + lines[steps[2] + 1:])
    trial = _one(tmp_path, text.encode())
    assert not trial.valid and "iteration logged twice" in trial.reason


def test_dlperf_timestamp_rule_stays_available(tree, capsys):
    """``--speed-rule timestamps`` applies DLPerf's rule: these 4-step runs are too short for its window."""
    assert main(["extract", "--suite", "pytorch-bert", "--log-dir", str(tree), "--speed-rule", "timestamps",
                 "--warmup-iters", "1", "--measure-iters", "2", "--quiet", "--format", "json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    one = {(c["precision"], c["batch_size_per_device"], c["gpus"]): c for c in doc["cells"]}
    # fp32 1 GPU, steps 1-4 logged: 5 skipped + 3 needed > 4: refused, naming the count
    reasons = [t["reason"] for t in one[("fp32", 32, 1)]["trials"]]
    assert reasons and "only" in reasons[0] and "iterations after the first 5 steps" in reasons[0]
