"""The column store of samples (model.Samples): what parsers add is what readers see."""

import copy
import pickle

import pytest

from dlperf_tasks.core.model import ParsedLog, Sample, Samples, Trial, TrialResult, TrialStatus


def _rows():
    return [Sample(1, 250.5, "ms/iter", None, None, None, 10.4), Sample(2, 251.0, "ms/iter", 3, 17.5, 900.0, None),
            Sample(2, float("nan"), "ms/iter", 4, None, None, float("inf"))]


def test_columns_and_objects_agree():
    s = Samples(_rows())
    assert s.iteration == [1, 2, 2]
    assert s.rank == [None, 3, 4]
    assert len(s) == 3
    assert list(s)[:2] == _rows()[:2]
    assert s[1] == _rows()[1]
    assert s[-1].loss == float("inf")
    assert [x.iteration for x in reversed(s)] == [2, 2, 1]
    assert s[1:].iteration == [2, 2]
    assert isinstance(s[1:], Samples)


def test_add_columns_repeats_one_value_and_checks_lengths():
    s = Samples()
    s.add_columns([5, 6], [1.0, 2.0], "s", rank=[0, 0], timestamp=[1.0, 2.0], loss=None)
    assert s[1] == Sample(6, 2.0, "s", 0, 2.0, None, None)
    with pytest.raises(ValueError, match="2 iterations but columns of"):
        s.add_columns([7, 8], [1.0], "s")
    with pytest.raises(ValueError, match="columns of"):
        s.add_columns([7, 8], [1.0, 2.0], "s", rank=[1])
    assert len(s) == 2  # a refused add changes nothing


def test_extend_copy_clear_and_equality():
    rows = _rows()  # the same NaN object on both sides (NaN != NaN, as for a list of Sample)
    a = Samples(rows[:1])
    b = a.copy()
    b += rows[1:2]
    b.extend(Samples(rows[2:]))
    assert len(a) == 1 and len(b) == 3
    assert b == Samples(rows)
    assert b[:2] == _rows()[:2]  # equal to a list of Sample
    assert b[:2] != _rows()[:1]
    assert a != b
    b.clear()
    assert len(b) == 0 and not b and b.loss == []


def test_pickle_and_deepcopy_keep_every_column():
    s = Samples(_rows()[:2])
    for other in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert other == s
        assert other.timestamp == [None, 17.5]


def test_parsed_log_and_trial_result_turn_lists_into_samples():
    p = ParsedLog(samples=_rows())
    assert isinstance(p.samples, Samples) and p.samples.value[0] == 250.5
    cols = Samples(_rows())
    assert ParsedLog(samples=cols).samples is cols  # no copy for a Samples
    from dlperf_tasks.core.model import Cell, Window
    from dlperf_tasks.core.topology import Topology

    cell = Cell(suite="s", framework="mxnet_bert", model="bert-base", precision="fp32", batch_size_per_device=32,
                topology=Topology.parse("1n1g"), window=Window(20, 100))
    r = TrialResult(Trial(cell, 1), TrialStatus.OK, samples=_rows())
    assert isinstance(r.samples, Samples) and len(r.samples) == 3


def test_lazy_loss_texts_are_converted_on_first_read_and_survive_copies():
    import operator

    from dlperf_tasks.core.samples import LazyFloats

    s = Samples(_rows()[:1])
    s.add_columns([3, 4], [1.0, 2.0], "ms/iter", loss=LazyFloats(2, operator.add, "10.5\n9.25", "0.5\n0.75"))
    merged = Samples()
    merged += s  # the texts travel unconverted
    c = merged.copy()
    assert s._lazy and merged._lazy and c._lazy
    assert c.loss == [10.4, 11.0, 10.0]
    assert not c._lazy and merged._lazy  # converting one copy leaves the others as they were
    assert merged[-1].loss == 10.0 and list(s)[1].loss == 11.0
    assert pickle.loads(pickle.dumps(merged)).loss == [10.4, 11.0, 10.0]
    s.clear()
    assert s.loss == [] and len(s) == 0
    with pytest.raises(ValueError, match="columns of"):
        Samples().add_columns([1], [1.0], "s", loss=LazyFloats(2, None, "1\n2"))
    with pytest.raises(ValueError, match="op to combine"):
        LazyFloats(1, None, "1", "2")


def test_mxnet_bulk_path_and_line_path_give_the_same_samples():
    """The bulk path keeps plain-decimal losses as text; odd ones (nan, 1e-3) go line by line.
    Both give the same Sample objects and the same final loss."""
    from dlperf_tasks.frameworks import get

    def log(losses):
        return "".join(f"INFO:root:[step {i}]\tmlm_loss={m}\tnsp_loss= 0.75\tthroughput=1.2K tks/s\t"
                       f"lr=0.0001 time=0.25, latency=250.{i} ms/batch\n" for i, m in enumerate(losses, 1))

    plain = get("mxnet_bert").parse([log(["10.5", "9.25", "8.0"])])
    odd = get("mxnet_bert").parse([log(["10.5", "925e-2", "8.0"])])
    assert plain.samples._lazy and not odd.samples._lazy  # the two paths were taken
    assert list(plain.samples) == list(odd.samples)
    assert [s.loss for s in plain.samples] == [11.25, 10.0, 8.75]
    assert plain.facts.final_loss == odd.facts.final_loss == 8.75
    bad = get("mxnet_bert").parse([log(["10.5", "nan", "8.0"])])
    assert bad.facts.nonfinite_losses and bad.facts.final_loss == 8.75
