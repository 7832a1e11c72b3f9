"""Write synthetic logs in each framework's real format with chosen numbers (test data builders).

The line formats follow the fixtures in tests/data/fixture_logs (see their READMEs for the upstream
source lines): DLE ``run_pretraining.py`` (dllogger StdOutBackend), gluon-nlp ``run_pretraining.py``,
gluon-cv ``train_horovod.py``, tensorflow/models BERT (absl) and Megatron-LM ``pretrain_gpt.py``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

T0 = dt.datetime(2020, 9, 24, 3, 15, 11, 983512)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def dle(steps: list[int], sec_per_step: float, *, micro: int = 96, acc: int = 1, log_freq: int = 1, nproc: int = 1,
        nnodes: int = 1, figure: float | None = None, losses: dict[int, str] | None = None,
        config: bool = True, fp16: bool = True) -> str:
    """A DLE BERT log: launcher trace, Config Namespace (``train_batch_size`` already divided by the
    accumulation, as DLE logs it), one DLL line per logged step, the final summary line."""
    out = [f"+ python3 -m torch.distributed.launch --nproc_per_node={nproc} --nnodes {nnodes} --node_rank=0 "
           f"run_pretraining.py --train_batch_size={micro * acc} --gradient_accumulation_steps={acc}"]
    if config:
        out.append(f'DLL {T0} - PARAMETER Config : ["Namespace(allreduce_post_accumulation=False, amp=False, '
                   f"bert_model='bert-base-uncased', config_file='bert_config.json', do_train=True, fp16={fp16}, "
                   f"gradient_accumulation_steps={acc}, local_rank=0, log_freq={float(log_freq)}, "
                   f"max_steps={steps[-1]}.0, n_gpu=1, seed=42, train_batch_size={micro})\"] ")
        out.append(f"DLL {T0} - PARAMETER batch_size_per_gpu : {micro} ")
    first = steps[0]
    for s in steps:
        ts = T0 + dt.timedelta(seconds=10 + (s - first) * sec_per_step)
        loss = (losses or {}).get(s, "7.5")
        out.append(f"DLL {ts} - Training Epoch: 0 Training Iteration: {s}  average_loss : {loss}  "
                   f"step_loss : {loss}  learning_rate : 0.001 ")
    if figure is not None:
        ts = T0 + dt.timedelta(seconds=20 + (steps[-1] - first) * sec_per_step)
        out.append(f"DLL {ts} -  e2e_train_time : 100.0  training_sequences_per_second : {figure}  "
                   f"final_loss : 7.5  raw_train_time : 99.0 ")
    return "\n".join(out) + "\n"


def tf(steps: list[int], sec_per_step: float, *, total: int | None = None, losses: dict[int, str] | None = None,
       flags: str | None = None) -> str:
    out = [flags] if flags else []
    total = total or steps[-1]
    first = steps[0]
    for s in steps:
        t = dt.datetime(2020, 9, 2, 14, 21, 50) + dt.timedelta(seconds=(s - first) * sec_per_step)
        loss = (losses or {}).get(s, "10.71")
        out.append(f"I{t:%m%d %H:%M:%S.%f} 140286429083456 model_training_utils.py:444] Train Step: {s}/{total}  "
                   f"/ loss = {loss}  masked_lm_accuracy = 0.010106")
    return "\n".join(out) + "\n"


def mxnet_bert(steps: int, world: int, latency_ms: float, *, total_batch: int | None = None, accumulate: int = 1,
               losses: dict[int, str] | None = None) -> str:
    out = []
    if total_batch is not None:
        out.append(f"INFO:root:Namespace(accumulate={accumulate}, comm_backend='horovod', dtype='float32', "
                   f"log_interval=1, no_compute_acc=True, num_steps={steps}, total_batch_size={total_batch}, "
                   f"total_batch_size_eval={total_batch})")
    for s in range(1, steps + 1):
        mlm = (losses or {}).get(s, "7.38695")
        for _ in range(world):
            out.append(f"INFO:root:[step {s}]\tmlm_loss={mlm}\tnsp_loss= 0.72\tthroughput=16.0K tks/s\t"
                       f"lr=0.0000505 time=0.24, latency={latency_ms!r} ms/batch")
    return "\n".join(out) + "\n"


def rn50(batches: int, speed: float) -> str:
    out = []
    for b in range(1, batches + 1):
        out.append(f"INFO:root:Epoch[0] Rank[0] Batch[{b}]\taccuracy=0.000710\tlr=0.000070")
        out.append(f"INFO:root:Epoch[0] Batch[{b}]\tSpeed: {speed:.2f} samples/sec")
    return "\n".join(out) + "\n"


def megatron(iterations: list[int], latency_ms: float | dict[int, float], *, total: int = 130, gbs: int = 2,
             args: dict[str, object] | None = None, max_reserved: float | None = 13694.0,
             losses: dict[int, str] | None = None, prefix: str = "") -> str:
    """Megatron-LM: arguments block, iteration lines (``prefix`` e.g. torchrun's ``[default0]:``)."""
    out = []
    if args is not None:
        out.append("------------------------ arguments ------------------------")
        for k, v in sorted(args.items()):
            out.append(f"  {k} {'.' * max(3, 48 - len(k))} {v}")
        out.append("-------------------- end of arguments ---------------------")
    for it in iterations:
        lat = latency_ms[it] if isinstance(latency_ms, dict) else latency_ms
        loss = (losses or {}).get(it, "1.092878E+01")
        out.append(f"{prefix} iteration       {it}/     {total} | consumed samples:           {it * gbs} | "
                   f"elapsed time per iteration (ms): {lat} | learning rate: 3.750E-07 | global batch size:"
                   f"     {gbs} | lm loss: {loss} | loss scale: 2097152.0 | number of skipped iterations:   0 | "
                   f"number of nan iterations:   0 |")
        if max_reserved is not None and it == iterations[0]:
            out.append(f"{prefix}[Rank 0] (after {it} iterations) memory (MB) | allocated: 3122.4951171875 | "
                       f"max allocated: 12234.794921875 | reserved: {max_reserved} | max reserved: {max_reserved}")
    return "\n".join(out) + "\n"
