"""A step number too long for ``int()`` (Python refuses more than 4,300 digits) in a log: the trial is
invalid with a reason naming the lines, never a crash of the whole extraction (hostile input)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.measure.extract import extract_tree

FIX = Path(__file__).resolve().parents[1] / "data" / "fixture_logs"

# (suite, fixture tree, the literal before a step number on an iteration line)
CASES = [
    ("mxnet-bert", "mxnet_bert/bz32", "[step "),
    ("pytorch-bert", "pytorch_bert/fp16_ngc_bert_b96/pytorch", "Training Iteration: "),
    ("tensorflow-bert", "tensorflow_bert/bz32", "Train Step: "),
]


@pytest.mark.parametrize("suite_id,tree,literal", CASES)
@pytest.mark.parametrize("digits", [5000, 30])
def test_a_step_number_too_long_for_int_makes_the_trial_invalid_not_a_crash(tmp_path, suite_id, tree, literal,
                                                                           digits):
    dst = tmp_path / "logs"
    shutil.copytree(FIX / tree, dst)
    log = sorted(dst.glob("1n1g/*.log"))[0]
    text = log.read_text()
    at = text.index(literal) + len(literal)
    m = re.compile(r"\d+").match(text, at)
    assert m, f"no step number after {literal!r} in {log.name}"
    log.write_text(text[:at] + "9" * digits + text[m.end():])
    res = extract_tree(load_suite(suite_id), dst)
    bad = [t for t in res.trials if t.trial.cell.topology.name == "1n1g"]
    assert bad and not bad[0].valid, bad[0].reason if bad else "no 1n1g trial"
    if digits == 5000 and suite_id == "mxnet-bert":  # longer than a step line may be (MAX_STEP_LINE)
        assert "not read as a step line" in bad[0].reason and "cap" in bad[0].reason, bad[0].reason
    elif digits == 5000:
        assert "unreadable value" in bad[0].reason and "digits" in bad[0].reason, bad[0].reason
    base = extract_tree(load_suite(suite_id), FIX / tree)  # the other trials are read as without the change
    others = [(t.trial.id, t.valid, t.reason) for t in res.trials if t.trial.cell.topology.name != "1n1g"]
    assert others and others == [(t.trial.id, t.valid, t.reason) for t in base.trials
                                 if t.trial.cell.topology.name != "1n1g"]
