"""Format variants of the Megatron-LM and gluon-cv families the genuine corpus does not
cover line for line (line formats from NVIDIA/Megatron-LM ``megatron/training.py`` 2019-2024 and
dmlc/gluon-cv ``scripts/classification/imagenet/train_imagenet.py``)."""

from __future__ import annotations

from dlperf_tasks.frameworks import get
from dlperf_tasks.core.model import Cell, ParallelLayout, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.measure.validity import gate
from tests.unit import logwriters as W

ITS = list(range(10, 131, 10))
WIN = Window(10, 120)


def _run(fw: str, text: str, bsz: int, window: Window, layout=None, topo: str = "1n1g"):
    cell = Cell(suite=fw, framework=fw, model="m", precision="amp", batch_size_per_device=bsz,
                topology=Topology.parse(topo), window=window, layout=layout)
    f = get(fw)
    return gate(f, Trial(cell, 1), f.parse([text]), window), f.parse([text])


def test_torchrun_prefix_gives_the_same_figure():
    plain, _ = _run("megatron_gpt", W.megatron(ITS, 464.1), 2, WIN)
    tagged, _ = _run("megatron_gpt", W.megatron(ITS, 464.1, prefix="[default0]:"), 2, WIN)
    assert plain.status == tagged.status == TrialStatus.OK, tagged.reason
    assert plain.metric.value == tagged.metric.value == 464.1


def test_skipped_iterations_are_work_done_not_an_error():
    text = W.megatron(ITS, 464.1).replace("number of skipped iterations:   0", "number of skipped iterations:  10", 1)
    text = text.replace("| lm loss: 1.092878E+01 ", "", 1)  # Megatron prints no loss for an all-skipped interval
    r, parsed = _run("megatron_gpt", text, 2, WIN)
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == 464.1
    assert parsed.extra["skipped_iterations"] == {10: 10}


def test_nan_iterations_make_the_trial_invalid():
    text = W.megatron(ITS, 464.1).replace("number of nan iterations:   0", "number of nan iterations:   3", 1)
    r, _ = _run("megatron_gpt", text, 2, WIN)
    assert r.status == TrialStatus.INVALID_LOG
    assert "iteration 10: number of nan iterations = 3" in r.reason


def test_2019_lm_loss_without_colon_is_read():
    text = W.megatron(ITS, 464.1).replace("lm loss: 1.092878E+01", "lm loss 1.092878E+01")
    r, parsed = _run("megatron_gpt", text, 2, WIN)
    assert r.status == TrialStatus.OK and parsed.facts.final_loss == 10.92878


def test_model_from_the_arguments_block_when_the_file_name_has_none():
    """A file name without ``_l.._hsz.._ahs..`` gives a layout with 0 for the model: no false
    "the cell's is 0" reasons; a fact the name did state is still checked."""
    lay = ParallelLayout(group="DP", case="DP_1x1x1_2", dp=1, mp=1, pp=1, micro_batch=2, global_batch=2,
                         hidden_size=0, num_heads=0, num_layers=0)
    args = {"num_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "micro_batch_size": 2,
            "global_batch_size": 2, "data_parallel_size": 1, "seq_length": 1024}
    ok, _ = _run("megatron_gpt", W.megatron(ITS, 464.1, args=args), 2, WIN, layout=lay)
    assert ok.status == TrialStatus.OK, ok.reason
    bad, _ = _run("megatron_gpt", W.megatron(ITS, 464.1, args={**args, "global_batch_size": 4}), 2, WIN, layout=lay)
    assert bad.status == TrialStatus.INVALID_LOG
    assert "log's global batch is 4 (arguments block: global_batch_size), the cell's (DP_1x1x1_2) is 2" in bad.reason
    assert "the cell's (DP_1x1x1_2) is 0" not in bad.reason


def _imagenet(batches: int, interval: int, speeds: dict[int, float], batch_size: int = 64) -> str:
    """train_imagenet.py: ``logger.info(opt)`` then a line when ``(i+1) % log_interval == 0``, i from 0."""
    out = [f"INFO:root:Namespace(batch_size={batch_size}, dtype='float16', log_interval={interval}, "
           "mode='hybrid', model='resnet50_v1b', num_gpus=8)"]
    for i in range(batches):
        if (i + 1) % interval == 0:
            out.append(f"INFO:root:Epoch[0] Batch [{i}]\tSpeed: {speeds.get(i + 1, 3000.0):f} samples/sec\t"
                       "accuracy=0.001000\tlr=0.100000")
    out.append("INFO:root:[Epoch 0] training: accuracy=0.001000")
    return "\n".join(out) + "\n"


def test_train_imagenet_zero_based_batches_with_a_stride():
    speeds = {20: 9999.0, 40: 3000.123456, 60: 3100.0, 80: 3200.0, 100: 3300.0, 120: 3400.0}
    r, parsed = _run("mxnet_resnet50", _imagenet(130, 20, speeds), 64, Window(20, 100), topo="1n8g")
    assert r.status == TrialStatus.OK, r.reason
    assert sorted(set(parsed.samples.iteration)) == [20, 40, 60, 80, 100, 120]
    assert r.metric.value == round((3000.12 + 3100 + 3200 + 3300 + 3400) / 5, 2)  # batch 20's line is warm-up


def test_train_imagenet_missing_line_is_named():
    text = _imagenet(130, 20, {}).replace("Batch [79]", "Batch [x79]")
    r, _ = _run("mxnet_resnet50", text, 64, Window(20, 100), topo="1n8g")
    assert r.status == TrialStatus.INVALID_LOG and "missing batches 80" in r.reason


def test_dist_kvstore_is_refused_with_the_reason():
    text = _imagenet(130, 20, {}).replace("num_gpus=8)", "num_gpus=8, kvstore='dist_sync')")
    r, _ = _run("mxnet_resnet50", text, 64, Window(20, 100), topo="1n8g")
    assert r.status == TrialStatus.INVALID_LOG and "kvstore is 'dist_sync'" in r.reason
