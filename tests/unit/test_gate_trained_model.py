"""The gate checks what the log says it trained: the model the log's own arguments name (gluon-cv /
gluon-nlp ``Namespace(model=...)``, DLE ``bert_model``/``config_file``, TensorFlow BERT's
``--bert_config_file``) against the cell's, in every framework that prints one; a non-finite
grad norm inside the window (Megatron prints ``grad norm: nan`` and omits ``lm loss``, while
``number of nan iterations`` may say 0) invalidates the trial; an older gluon-nlp Namespace line
without ``total_batch_size`` still gives its ``log_interval``. Line formats: gluon-cv
f9a8a28 train_horovod.py ``logger.info(opt)``, gluon-nlp run_pretraining.py ``logging.info(args)``,
DLE ``dllogger.log(step="PARAMETER", data={"Config": [str(args)]})``, Megatron training.py
``training_log`` (``grad norm: {:.3f}``)."""

from __future__ import annotations

import pytest

from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.frameworks import get
from dlperf_tasks.measure.trained import model_kind
from dlperf_tasks.measure.validity import gate
from tests.unit import logwriters as W


def _gate(fw: str, model: str, text: str, bsz: int, window: Window, precision: str = "fp32"):
    cell = Cell(suite=fw, framework=fw, model=model, precision=precision, batch_size_per_device=bsz,
                topology=Topology.parse("1n1g"), window=window)
    f = get(fw)
    return gate(f, Trial(cell, 1), f.parse([text]), window)


def _rn50(model: str) -> str:
    ns = (f"INFO:root:Namespace(batch_norm=False, batch_size=128, dtype='float32', kvstore='device', "
          f"log_interval=1, lr=0.1, mode='hybrid', model='{model}', num_epochs=1, use_rec=True)\n")
    return ns + W.rn50(120, 400.0)


@pytest.mark.parametrize("model,ok", [("resnet50_v1b", True), ("resnet101_v1b", False), ("resnet50_v1d", False)])
def test_gluon_cv_namespace_model_against_the_cell(model, ok):
    r = _gate("mxnet_resnet50", "resnet50-v1b", _rn50(model), 128, Window(20, 100))
    if ok:
        assert r.status == TrialStatus.OK, r.reason
    else:
        assert r.status == TrialStatus.INVALID_LOG
        assert f"its model is '{model}' (gluon-cv Namespace line)" in r.reason and "'resnet50-v1b'" in r.reason


def _nlp(namespace: str, fmt_latency: bool = True, interval: int = 1) -> str:
    out = [namespace]
    for s in range(interval, 121, interval):
        tail = "latency=250.0 ms/batch" if fmt_latency else ""
        out.append(f"INFO:root:[step {s}]\tmlm_loss=7.38695\tnsp_loss= 0.72\tthroughput=16.0K tks/s\t"
                   f"lr=0.0000505 time={0.25 * interval:.2f}, {tail}".rstrip(", "))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("model,ok", [("bert_12_768_12", True), ("bert_24_1024_16", False)])
def test_gluon_nlp_namespace_model_against_the_cell(model, ok):
    ns = (f"INFO:root:Namespace(accumulate=1, dtype='float32', log_interval=1, model='{model}', num_steps=120, "
          f"total_batch_size=32, total_batch_size_eval=32)")
    r = _gate("mxnet_bert", "bert-base", _nlp(ns), 32, Window(20, 100))
    assert (r.status == TrialStatus.OK) == ok, r.reason
    if not ok:
        assert "its model is 'bert_24_1024_16' (gluon-nlp Namespace line)" in r.reason


def test_an_older_gluon_nlp_namespace_without_total_batch_size_still_gives_its_log_interval():
    ns = ("INFO:root:Namespace(accumulate=1, batch_size=32, dtype='float32', log_interval=10, "
          "model='bert_12_768_12', num_steps=120)")
    r = _gate("mxnet_bert", "bert-base", _nlp(ns, fmt_latency=False, interval=10), 32, Window(20, 100))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == 128.0  # 2.5 s over 10 steps = 250 ms a step, 32 samples


@pytest.mark.parametrize("bert_model,config,ok", [
    ("bert-base-uncased", "bert_config.json", True),
    ("bert-large-uncased", "bert_config.json", False),
    ("bert-base-uncased", "/workspace/bert/bert_config_large.json", False),
])
def test_dle_bert_model_and_config_against_the_cell(bert_model, config, ok):
    text = W.dle(list(range(1, 126)), 0.5, micro=32, fp16=False).replace(
        "bert_model='bert-base-uncased', config_file='bert_config.json'",
        f"bert_model='{bert_model}', config_file='{config}'")
    r = _gate("pytorch_bert", "bert-base", text, 32, Window(20, 100))
    assert (r.status == TrialStatus.OK) == ok, r.reason
    if not ok:
        assert "log trained another model" in r.reason and "DLE PARAMETER Config line" in r.reason


def test_tensorflow_bert_config_directory_against_the_cell():
    flags = ("+ python3 run_pretraining.py --train_batch_size=32 --num_gpus=1 --dtype=fp32 "
             "--bert_config_file=/data/uncased_L-24_H-1024_A-16/bert_config.json")
    r = _gate("tensorflow_bert", "bert-base", W.tf(list(range(1, 121)), 0.1, flags=flags), 32, Window(20, 100))
    assert r.status == TrialStatus.INVALID_LOG and "its bert_config_file is" in r.reason
    ok = _gate("tensorflow_bert", "bert-base",
               W.tf(list(range(1, 121)), 0.1, flags=flags.replace("L-24_H-1024_A-16", "L-12_H-768_A-12")),
               32, Window(20, 100))
    assert ok.status == TrialStatus.OK, ok.reason


ITS = list(range(10, 131, 10))


def _megatron_nan_grad(its_with_nan) -> str:
    text = W.megatron(ITS, 464.1)
    lines = []
    for line in text.splitlines():
        if "elapsed time per iteration" not in line:
            lines.append(line)
            continue
        it = int(line.split("iteration")[1].split("/")[0])
        if it in its_with_nan:  # what Megatron prints when the loss is not finite: no lm loss, grad norm nan
            line = line.replace("| lm loss: 1.092878E+01 ", "").replace("| number of skipped", "| grad norm: nan | number of skipped")
        else:
            line = line.replace("| number of skipped", "| grad norm: 1.234 | number of skipped")
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_megatron_every_iteration_nan_grad_norm_and_no_loss_is_invalid_though_nan_iterations_says_0():
    text = _megatron_nan_grad(set(ITS))
    assert "number of nan iterations:   0" in text and "lm loss" not in text
    r = _gate("megatron_gpt", "gpt", text, 2, Window(10, 120), precision="amp")
    assert r.status == TrialStatus.INVALID_LOG and "non-finite grad norm at iteration(s) 20, 30" in r.reason


def test_a_nan_grad_norm_only_in_the_warmup_leaves_the_trial_valid():
    r = _gate("megatron_gpt", "gpt", _megatron_nan_grad({10}), 2, Window(10, 120), precision="amp")
    assert r.status == TrialStatus.OK, r.reason


def test_model_kind_places_only_what_it_knows():
    assert model_kind("bert_config.json") is None and model_kind("gpt") is None
    assert model_kind("'resnet50_v1b'") == model_kind("resnet50-v1b") != model_kind("resnet101_v1b")
    assert model_kind("bert_24_1024_16") == model_kind("bert-large-uncased") == "bert-large"
