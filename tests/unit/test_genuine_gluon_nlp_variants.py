"""Every ``[step N]`` line form of dmlc/gluon-nlp ``scripts/bert/run_pretraining.py`` /
``pretraining_utils.py`` (2019-2020 versions; format strings copied from those files): with
``latency=... ms/batch`` (the seed's 7b7bf60), ``ms/step``, with ``mlm_acc``/``nsp_acc``, and without
``latency=`` (then ``time`` over ``log_interval`` steps). No genuine public log of this family was
found (docs/fidelity.md), so these lines are built from the upstream format strings."""

from __future__ import annotations

from dlperf_tasks.frameworks import get
from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.measure.validity import gate

WIN = Window(20, 100)
SEED = ("[step {}]\tmlm_loss={:7.5f}\tnsp_loss={:5.2f}\tthroughput={:.1f}K tks/s\tlr={:.7f} time={:.2f}, "
        "latency={:.1f} ms/batch")
ACC_STEP = ("[step {}]\tmlm_loss={:7.5f}\tmlm_acc={:4.2f}\tnsp_loss={:5.2f}\tnsp_acc={:5.2f}\tthroughput={:.1f}K tks/s"
            "\tlr={:.7f} time={:.2f}, latency={:.1f} ms/step")
NO_LATENCY = ("[step {}]\tmlm_loss={:.5f}\tmlm_acc={:.5f}\tnsp_loss={:.5f}\tnsp_acc={:.3f}\tthroughput={:.1f}K tks/s"
              "\tlr={:.7f} time={:.2f}")
NAMESPACE = ("INFO:root:Namespace(accumulate=1, dtype='float16', log_interval={}, num_steps=120, "
             "total_batch_size=32, total_batch_size_eval=32)")


def _run(text: str):
    cell = Cell(suite="mxnet_bert", framework="mxnet_bert", model="m", precision="amp", batch_size_per_device=32,
                topology=Topology.parse("1n1g"), window=WIN)
    f = get("mxnet_bert")
    return gate(f, Trial(cell, 1), f.parse([text]), WIN)


def _log(fmt: str, interval: int, seconds: float, namespace: bool = True) -> str:
    out = [NAMESPACE.format(interval)] if namespace else []
    for step in range(interval, 121, interval):
        vals = {SEED: (7.38695, 0.72, 16.0, 0.0000505, seconds, seconds * 1000 / interval),
                ACC_STEP: (7.38695, 45.1, 0.72, 51.0, 16.0, 0.0000505, seconds, seconds * 1000 / interval),
                NO_LATENCY: (7.38695, 45.1, 0.72, 51.0, 16.0, 0.0000505, seconds)}[fmt]
        out.append("INFO:root:" + fmt.format(step, *vals))
    return "\n".join(out) + "\n"


def test_seed_form_with_latency():
    r = _run(_log(SEED, 1, 0.25))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == 128.0  # 1000 / 250 ms x 32 samples


def test_acc_fields_and_ms_per_step():
    r = _run(_log(ACC_STEP, 1, 0.25))
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == 128.0


def test_without_latency_time_over_the_log_interval():
    r = _run(_log(NO_LATENCY, 10, 2.5))  # 2.5 s over 10 steps = 250 ms a step
    assert r.status == TrialStatus.OK, r.reason
    assert r.metric.value == 128.0


def test_without_latency_and_without_namespace_is_refused_with_the_reason():
    r = _run(_log(NO_LATENCY, 10, 2.5, namespace=False))
    assert r.status == TrialStatus.INVALID_LOG
    assert "no Namespace log_interval to turn its 'time=' into ms per step" in r.reason
