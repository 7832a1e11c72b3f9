"""Statistics: the seeds' printed per-trial speeds must give exactly the seeds' printed dicts."""

import math
import pprint

import pytest

from dlperf_tasks.core.model import Cell, MetricKind, ParallelLayout, Trial, TrialMetric, TrialResult, TrialStatus
from dlperf_tasks.measure.stats import aggregate, config_key, dlperf_dict
from dlperf_tasks.core.topology import Topology
from tests.unit.dlperf_seed_data import SEEDS


def make_cell(seed_or_suite="mxnet-bert", topo="1n1g", bz=32, precision="fp32", model="bert-base",
              framework="mxnet_bert", xla=False, layout=None):
    return Cell(suite=seed_or_suite, framework=framework, model=model, precision=precision,
                batch_size_per_device=bz, topology=Topology.parse(topo), xla=xla, layout=layout)


def ok(cell, index, value, kind=MetricKind.THROUGHPUT, **kw):
    return TrialResult(trial=Trial(cell, index), status=TrialStatus.OK, metric=TrialMetric(value, kind, **kw))


def seed_results(seed):
    results = []
    for topo, trials in seed["TRIALS"].items():
        cell = make_cell(seed["suite"], topo, seed["batch_size_per_device"], seed["precision"], seed["model"],
                         seed["framework"])
        results += [ok(cell, i, v) for i, v in trials.items()]
    return results


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_dicts_reproduced_exactly(name):
    seed = SEEDS[name]
    cells = aggregate(seed_results(seed))
    d = dlperf_dict(cells, seed["dlperf_model"])
    key = f"bz{seed['batch_size_per_device']}"
    assert list(d) == [key]
    text = pprint.pformat(d[key])
    # seed 003's text lost its indentation: compare stripped lines; the others byte for byte
    if name.startswith("003"):
        assert [l.strip() for l in text.splitlines()] == [l.strip() for l in seed["DICT_TEXT"].splitlines()]
    else:
        assert text == seed["DICT_TEXT"]


def test_mxnet_bert_bz32_numbers_and_dispersion():
    cells = {c.cell.topology.name: c for c in aggregate(seed_results(SEEDS["000-mxnet-bert-bz32"]))}
    assert [(c.median, c.average, c.speedup) for c in cells.values()] == [
        (127.05, 126.74, 1.0), (928.03, 929.95, 7.3), (1136.44, 1121.58, 8.94), (1895.5, 1906.32, 14.92)]
    one = cells["1n1g"]
    assert one.speedup_state == "baseline" and cells["4n8g"].speedup_state == "ok"
    assert (one.min, one.max, one.n_valid, one.n_invalid) == (125.48, 127.73, 7, 0)
    assert one.stdev == pytest.approx(0.7404, abs=1e-4)  # sqrt(3.2891 / 6)
    assert one.cv == pytest.approx(0.7404 / 126.744, abs=1e-4)
    assert cells["1n8g"].scaling_efficiency == pytest.approx(7.3 / 8)
    assert cells["4n8g"].scaling_efficiency == pytest.approx(14.92 / 32, abs=1e-4)


def test_missing_baseline_gives_none_not_one():
    c8 = make_cell(topo="1n8g")
    cells = aggregate([ok(c8, 1, 900.0), ok(c8, 2, 910.0)])
    (st,) = cells
    assert st.median == 905.0
    assert st.speedup is None and st.speedup_state == "missing_baseline" and st.scaling_efficiency is None
    assert dlperf_dict(cells)["bz32"]["bert-base"]["1n8g"]["speedup"] is None


def test_baseline_with_only_invalid_trials_is_missing():
    c1, c8 = make_cell(topo="1n1g"), make_cell(topo="1n8g")
    bad = TrialResult(trial=Trial(c1, 1), status=TrialStatus.INVALID_LOG, reason="log ends at iteration 50",
                      metric=TrialMetric(120.0))
    cells = {c.cell.topology.name: c for c in aggregate([bad, ok(c8, 1, 900.0)])}
    assert cells["1n1g"].median is None and cells["1n1g"].speedup_state == "no_valid_trials"
    assert cells["1n1g"].n_invalid == 1 and cells["1n1g"].n_valid == 0
    assert cells["1n8g"].speedup is None and cells["1n8g"].speedup_state == "missing_baseline"
    assert "1n1g" not in dlperf_dict(cells.values())["bz32"]["bert-base"]


def test_invalid_trial_excluded_but_counted():
    c1 = make_cell()
    results = [ok(c1, 1, 100.0), ok(c1, 2, 102.0),
               TrialResult(trial=Trial(c1, 3), status=TrialStatus.INVALID_LOG, reason="crash marker in log: Traceback",
                           metric=TrialMetric(5.0))]
    (st,) = aggregate(results)
    assert st.values == [100.0, 102.0] and st.median == 101.0 and st.average == 101.0 and st.min == 100.0
    assert (st.n_valid, st.n_invalid) == (2, 1)
    assert [t.reason for t in st.invalid_trials] == ["crash marker in log: Traceback"]


def test_baselines_are_per_precision_xla_and_batch_size():
    res = [ok(make_cell(topo="1n1g", precision="fp32"), 1, 100.0),
           ok(make_cell(topo="1n8g", precision="fp32"), 1, 700.0),
           ok(make_cell(topo="1n1g", precision="amp"), 1, 300.0),
           ok(make_cell(topo="1n8g", precision="amp"), 1, 1500.0),
           ok(make_cell(topo="1n8g", precision="amp", xla=True), 1, 2000.0),
           ok(make_cell(topo="1n8g", bz=24), 1, 650.0)]
    cells = aggregate(res)
    got = {(c.cell.precision, c.cell.xla, c.cell.batch_size_per_device, c.cell.topology.name): (c.speedup, c.speedup_state)
           for c in cells}
    assert got[("fp32", False, 32, "1n8g")] == (7.0, "ok")
    assert got[("amp", False, 32, "1n8g")] == (5.0, "ok")
    assert got[("amp", True, 32, "1n8g")] == (None, "missing_baseline")
    assert got[("fp32", False, 24, "1n8g")] == (None, "missing_baseline")
    assert sorted(dlperf_dict(cells)) == ["bz24", "bz32", "bz32_fp16", "bz32_fp16_xla"]
    assert config_key(make_cell(xla=True)) == "bz32_xla"


def test_median_even_count_and_rounding_like_dlperf():
    c1 = make_cell()
    (st,) = aggregate([ok(c1, i, v) for i, v in enumerate([100.004, 100.006, 101.0, 99.0], 1)])
    # trial values are rounded first (100.0, 100.01, 101.0, 99.0) like DLPerf's printed values
    assert st.values == [100.0, 100.01, 101.0, 99.0]
    assert st.median == 100.0  # (100.0 + 100.01) / 2 = 100.005 -> round() -> 100.0 (binary float)
    assert st.average == round((100.0 + 100.01 + 101.0 + 99.0) / 4, 2)


def test_single_trial_has_no_stdev():
    (st,) = aggregate([ok(make_cell(), 1, 126.0)])
    assert st.stdev is None and st.cv is None and st.speedup == 1.0


def test_latency_cells_megatron():
    layout = ParallelLayout("DP", "DP_1x1x1_2_1536x16", 1, 1, 1, 2, 2, 1536, 16, 16)
    cell = make_cell("megatron-gpt", "1n1g", 2, "amp", "gpt", "megatron_gpt", layout=layout)
    (st,) = aggregate([ok(cell, 1, 464.1234, MetricKind.LATENCY, memory_mib=14362.0, throughput=4.31)])
    assert st.metric_kind == MetricKind.LATENCY and st.unit == "ms/iter"
    assert st.latency_ms == 464.12 and st.memory_mib == 14362.0 and st.throughput == 4.31
    assert st.speedup is None and st.speedup_state == "not_applicable"
    assert dlperf_dict([st]) == {}


def test_non_finite_metric_is_not_a_value():
    c1 = make_cell()
    (st,) = aggregate([ok(c1, 1, math.nan), ok(c1, 2, 10.0)])
    assert st.values == [10.0]


def test_cell_without_any_metric_takes_kind_from_framework():
    layout = ParallelLayout("DP", "DP_8x1x1_16_1536x16", 8, 1, 1, 2, 16, 1536, 16, 16)
    cell = make_cell("megatron-gpt", "1n8g", 2, "amp", "gpt", "megatron_gpt", layout=layout)
    (st,) = aggregate([TrialResult(trial=Trial(cell, 1), status=TrialStatus.HANG, reason="no progress for 600 s")])
    assert st.metric_kind == MetricKind.LATENCY and st.speedup_state == "not_applicable" and st.n_invalid == 1
