"""The validity gate on real parsed fixture logs (TensorFlow BERT) and on hand-made ParsedLogs."""

import math
from pathlib import Path

from dlperf_tasks import frameworks
from dlperf_tasks.measure.extract import _decode_stream
from dlperf_tasks.core.model import Cell, LogFacts, ParsedLog, Sample, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.measure.validity import gate, iteration_problems

FIX = Path(__file__).resolve().parent.parent / "data" / "fixture_logs"
TF_LOG = FIX / "tensorflow_bert/bz32/1n1g/bert_b32_fp32_1.log"


def tf_trial():
    cell = Cell("tensorflow-bert", "tensorflow_bert", "bert-base", "fp32", 32, Topology.parse("1n1g"))
    return Trial(cell, 1)


def parsed_tf(lines=None):
    fw = frameworks.get("tensorflow_bert")
    return fw, fw.parse(lines if lines is not None else _decode_stream(open(TF_LOG, "rb")))


def test_valid_log_passes_with_dlperf_speed():
    fw, p = parsed_tf()
    r = gate(fw, tf_trial(), p, Window(20, 100), exit_codes={"node1": 0})
    assert r.status == TrialStatus.OK and r.reason == "" and r.valid
    assert round(r.metric.value, 2) == 103.60 and r.samples


def test_nonzero_exit_code_is_named():
    fw, p = parsed_tf()
    r = gate(fw, tf_trial(), p, Window(20, 100), exit_codes={"node1": 0, "node2": 137})
    assert r.status == TrialStatus.NONZERO_EXIT and "node2 exited with code 137" in r.reason and not r.valid
    assert round(r.metric.value, 2) == 103.60  # raw value kept for the report


def test_runtime_status_is_kept():
    fw, p = parsed_tf()
    r = gate(fw, tf_trial(), p, Window(20, 100), runtime_status=TrialStatus.HANG,
             runtime_reason="no new log line for 600 s")
    assert r.status == TrialStatus.HANG and r.reason.startswith("no new log line for 600 s") and not r.valid


def test_window_longer_than_log_is_truncation():
    fw, p = parsed_tf()
    r = gate(fw, tf_trial(), p, Window(20, 200))
    assert r.status == TrialStatus.INVALID_LOG
    assert "log ends at iteration 120, expected 220" in r.reason


def test_missing_line_in_the_middle():
    lines = [l for l in TF_LOG.read_text().splitlines() if "Train Step: 57/" not in l]
    fw, p = parsed_tf(lines)
    r = gate(fw, tf_trial(), p, Window(20, 100))
    assert r.status == TrialStatus.INVALID_LOG and "missing iterations 57" in r.reason




def test_non_finite_and_non_positive_values_and_markers():
    from dlperf_tasks.frameworks.base import Framework
    from dlperf_tasks.core.model import TrialMetric

    class Plain(Framework):
        name = "plain"

        def launch(self, *a, **k):  # pragma: no cover - not used
            raise NotImplementedError

        def parse(self, lines):  # pragma: no cover - not used
            raise NotImplementedError

        def trial_metric(self, parsed, cell, window, span=None):
            vals = [s.value for s in parsed.samples if s.iteration > window.warmup]
            return TrialMetric(sum(vals) / len(vals))

    samples = [Sample(i, 10.0, "samples/s") for i in range(1, 11)]
    samples[6] = Sample(7, math.nan, "samples/s")
    samples[8] = Sample(9, -1.0, "samples/s")
    p = ParsedLog(samples=samples, facts=LogFacts(iterations_seen=list(range(1, 11)), crash_markers=["Killed"],
                                                  errors=["line 3: garbage"]))
    cell = Cell("s", "plain", "m", "fp32", 8, Topology.parse("1n1g"))
    r = gate(Plain(), Trial(cell, 1), p, Window(2, 8))
    assert r.status == TrialStatus.INVALID_LOG
    assert "non-finite or non-positive values (2): iteration 7: nan, iteration 9: -1.0" in r.reason
    assert "crash marker in log: Killed" in r.reason and "unparsable lines: line 3: garbage" in r.reason

    clean = ParsedLog(samples=[Sample(i, 0.0 if i == 1 else 10.0, "s") for i in range(1, 11)],
                      facts=LogFacts(iterations_seen=list(range(1, 11))))
    r = gate(Plain(), Trial(cell, 2), clean, Window(2, 8))
    assert r.status == TrialStatus.OK, r.reason  # timestamps may be 0


def test_iteration_problems_with_log_interval():
    assert iteration_problems(list(range(10, 131, 10)), Window(10, 120)) == []
    assert iteration_problems([10, 20, 40, 50, 60], Window(10, 50)) == ["missing iterations 30"]
    assert iteration_problems([], Window()) == ["no iteration lines found in the log"]
