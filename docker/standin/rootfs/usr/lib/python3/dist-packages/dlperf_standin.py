#!/usr/bin/env python3
"""dlperf stand-in trainer: prints a framework's REAL training-log format at a chosen speed.

Stdlib only (runs in a minimal Debian image with python3, openssh-server, openmpi-bin).
Used in place of the GPU training scripts so that a benchmark sweep's numbers are
known in advance. Two entry points:

* CLI: ``dlperf-standin --format pytorch_bert --speed 463.11 --iters 150 --rank 0 --world 1 --batch-size 96``
* shims (:func:`shim_main`): the files that replace ``run_pretraining.py``,
  ``train_horovod.py`` and ``pretrain_gpt.py`` in the image parse the real training
  flags, take rank/world from the launcher's environment (OpenMPI ``OMPI_COMM_WORLD_*``,
  torch.distributed.launch ``RANK``/``WORLD_SIZE``...) and the speed from the
  ``DLPERF_STANDIN_*`` environment variables below.

Exactness: the printed numbers parse back (with dlperf's framework parsers, i.e.
DLPerf's rules) to the configured speed rounded to 2 decimals. Time stamps and
latencies are synthetic (computed from the speed, starting at the real start time),
while the process really sleeps ``step_time x time_scale`` per step, so a run with
``--time-scale 0.01`` is fast but reads as if it ran at full length.

Environment (shims; CLI flags win):
  DLPERF_STANDIN_SPEED            global samples/s for every topology
  DLPERF_STANDIN_SPEED_<N>N<G>G   global samples/s for one topology, e.g. DLPERF_STANDIN_SPEED_2N8G
  DLPERF_STANDIN_SPEED_PER_GPU    otherwise: speed = per_gpu x world x SCALING (SCALING only
                                  when world > 1), rounded to 2 decimals (default 100)
  DLPERF_STANDIN_SCALING          scaling efficiency of multi-GPU runs (default 1.0)
  DLPERF_STANDIN_LATENCY_MS[_<N>N<G>G]  Megatron ms/iteration (default global_batch*1000/speed)
  DLPERF_STANDIN_MEMORY_MB        Megatron "max reserved" MB (default 13694.0)
  DLPERF_STANDIN_TIME_SCALE       real sleep = synthetic step time x this (default 1.0)
  DLPERF_STANDIN_LOSS_SCALE=f     pytorch_bert: every printed loss x f (default 1; "nan" prints nan
                                  losses: a diverged run; 1.5: a run whose final loss is off its history)
  DLPERF_STANDIN_BURN_CORES=N     every rank spins N busy child processes while it trains (a CPU-bound
                                  input pipeline: the host's cores saturated while the GPUs idle)
  DLPERF_STANDIN_RAMP_ITERS=K     time-stamped formats: speed ramps up over the first K iterations
                                  (from DLPERF_STANDIN_RAMP_START x speed, default 0.5): not steady
  DLPERF_STANDIN_HANG_AFTER=K     stop making progress after iteration K (sleep until killed)
  DLPERF_STANDIN_HANG_RANK=r      only rank r hangs (default: every rank)
  DLPERF_STANDIN_CRASH_AFTER=K    print a Traceback after iteration K and exit
  DLPERF_STANDIN_CRASH_RANK=r     only rank r crashes (default: every rank)
  DLPERF_STANDIN_EXIT_CODE=C      exit status of a crash (default 1)
  DLPERF_STANDIN_RECORD=path      every rank appends one JSON line (argv, rank, world, env) here
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import random
import signal
import socket
import stat
import sys
import termios
import time

FORMATS = ("mxnet_bert", "mxnet_resnet50", "pytorch_bert", "tensorflow_bert", "megatron_gpt")
_RECORD_ENV_PREFIXES = ("MASTER_", "NODE_RANK", "NNODES", "GPUS_PER_NODE", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                        "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_", "NCCL_", "TF_", "CUDA_VISIBLE_DEVICES",
                        "PYTHONPATH", "OMP_NUM_THREADS", "DLPERF_STANDIN_")


# --------------------------------------------------------------------------- config
class Config:
    """Everything one rank needs to emit its log."""

    def __init__(self, **kw):
        self.fmt: str = kw["fmt"]
        self.speed: float = float(kw.get("speed") or 100.0)  # global samples/s
        self.latency_ms: float | None = kw.get("latency_ms")  # megatron
        self.iters: int = int(kw.get("iters") or 120)
        self.rank: int = int(kw.get("rank") or 0)
        self.world: int = int(kw.get("world") or 1)
        self.local_rank: int = int(kw.get("local_rank") if kw.get("local_rank") is not None else self.rank)
        self.nodes: int = int(kw.get("nodes") or 1)
        self.batch: int = int(kw.get("batch") or 32)  # per device
        self.global_batch: int = int(kw.get("global_batch") or self.batch * self.world)
        self.log_interval: int = int(kw.get("log_interval") or 10)
        self.hang_after: int | None = kw.get("hang_after")
        self.crash_after: int | None = kw.get("crash_after")
        self.exit_code: int = int(kw.get("exit_code") if kw.get("exit_code") is not None else 1)
        self.time_scale: float = float(kw.get("time_scale") if kw.get("time_scale") is not None else 1.0)
        self.memory_mb: float = float(kw.get("memory_mb") or 13694.0)
        self.record: str | None = kw.get("record")
        self.argv: list[str] = list(kw.get("argv") or sys.argv)
        self.precision: str = kw.get("precision") or "fp32"
        self.extra: dict = {}  # shims: the parsed real flags ("namespace"), "model_config", Megatron "layout"
        self.start = time.time()
        self._wall0 = time.monotonic()

    @property
    def step_s(self) -> float:
        """Synthetic seconds per iteration (global batch / global speed)."""
        if self.fmt == "megatron_gpt":
            return (self.latency_ms or self.global_batch * 1000.0 / self.speed) / 1000.0
        return self.global_batch / self.speed

    def synthetic_us(self, k: int) -> int:
        """Synthetic time stamp (integer microseconds since the epoch) at the end of iteration k.
        ``DLPERF_STANDIN_RAMP_ITERS=K``: the speed ramps from ``DLPERF_STANDIN_RAMP_START`` (default
        0.5) x speed to the full speed over the first K iterations (a trial that is not yet steady;
        the log then no longer parses back to exactly the configured speed)."""
        ramp = int(os.environ.get("DLPERF_STANDIN_RAMP_ITERS") or 0)
        if ramp > 0:
            lo = float(os.environ.get("DLPERF_STANDIN_RAMP_START") or 0.5)
            secs = sum(self.step_s / (lo + (1 - lo) * min(1.0, (j - 1) / ramp)) for j in range(1, k + 1))
            return int(round(self.start * 1e6)) + int(round(secs * 1e6))
        return int(round(self.start * 1e6)) + int(round(k * self.step_s * 1e6))

    def pace(self, k: int) -> None:
        """Sleep until iteration k is due in (scaled) real time."""
        due = self._wall0 + k * self.step_s * self.time_scale
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def after_iteration(self, k: int, out) -> None:
        """Fault injection: hang or crash after iteration k."""
        if self.crash_after is not None and k >= self.crash_after:
            out.flush()
            crash(self)
        if self.hang_after is not None and k >= self.hang_after:
            out.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            while True:  # like a deadlocked NCCL collective: no output, no exit
                time.sleep(3600)


def crash(cfg: Config) -> None:
    msg = (
        "Traceback (most recent call last):\n"
        f'  File "{cfg.argv[0] if cfg.argv else "train.py"}", line 412, in <module>\n'
        "    main()\n"
        '  File "train.py", line 377, in train_step\n'
        "    loss.backward()\n"
        "RuntimeError: NCCL error in: /opt/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:784, "
        "unhandled system error, NCCL version 2.7.3\n"
    )
    sys.stdout.flush()
    sys.stderr.write(msg)
    sys.stderr.flush()
    os._exit(cfg.exit_code)


def record(cfg: Config) -> None:
    path = cfg.record or os.environ.get("DLPERF_STANDIN_RECORD")
    if not path:
        return
    env = {k: v for k, v in os.environ.items() if k.startswith(_RECORD_ENV_PREFIXES)}
    line = json.dumps({
        "format": cfg.fmt, "rank": cfg.rank, "local_rank": cfg.local_rank, "world": cfg.world,
        "nodes": cfg.nodes, "batch_size_per_device": cfg.batch, "global_batch": cfg.global_batch,
        "iters": cfg.iters, "speed": cfg.speed, "latency_ms": cfg.latency_ms, "precision": cfg.precision,
        "hostname": socket.gethostname(), "cwd": os.getcwd(), "pid": os.getpid(), "time": time.time(),
        "argv": cfg.argv, "env": env,
    }, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# OpenMPI's I/O forwarding reads a rank's output pipe at most 4096 bytes at a time and passes each
# chunk on as it is; with more than that unread, a chunk ends mid-line and another rank's line lands
# inside it. A real trainer prints a line every few hundred ms and never gets that far ahead of its
# reader; a stand-in running at a hundredth of the time can, so it waits for room first.
_FORWARD_CHUNK = 4096


def _unread(fd: int) -> int | None:
    """Bytes written to the pipe ``fd`` and not yet read by its reader (None: not a pipe)."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except (OSError, ValueError):
        return None


def _w(stream, text: str) -> None:
    line = text + "\n"
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        fd = -1
    deadline = time.monotonic() + 10
    while fd >= 0 and time.monotonic() < deadline:
        unread = _unread(fd)
        if unread is None or unread + len(line.encode()) <= _FORWARD_CHUNK:
            break
        time.sleep(0.001)
    stream.write(line)
    stream.flush()


def _quantised(target: float, k: int, quantum: float) -> float:
    """The k-th (1-based) value of a periodic sequence of multiples of ``quantum`` whose
    every run of 10 consecutive values averages exactly ``target`` when ``target`` has
    one more decimal than ``quantum`` (e.g. 464.12 from 0.1-ms values)."""
    base = int(target / quantum + 1e-9)
    frac = round(target / quantum - base, 6)  # 0.0 .. 0.9
    ups = int(round(frac * 10))
    pos = (k - 1) % 10
    # spread the "ups" over the period (Bresenham)
    up = (pos + 1) * ups // 10 - pos * ups // 10
    return (base + up) * quantum


# --------------------------------------------------------------------------- formats
def emit_mxnet_bert(cfg: Config) -> None:
    """gluon-nlp run_pretraining.py: every rank logs every step to stderr (INFO:root: prefix)."""
    err = sys.stderr
    ns = cfg.extra.get("namespace")
    _w(err, "INFO:root:" + (str(ns) if ns is not None else
            "Namespace(accumulate=1, cased=False, ckpt_dir='./ckpt_dir', ckpt_interval=1000, "
            "comm_backend='horovod', dtype='float32', log_interval=1, model='bert_12_768_12', "
            f"num_steps={cfg.iters}, total_batch_size={cfg.global_batch}, warmup_ratio=1.0)"))
    _w(err, f"INFO:root:{cfg.extra.get('data_files', 64)} files are found.")
    rng = random.Random(cfg.rank)
    # latency printed with 1 decimal: choose per-step values whose speeds average to the target
    target_speed = cfg.speed  # global = 1000/lat * batch * world
    exact_lat = 1000.0 * cfg.batch * cfg.world / target_speed
    lo = max(int(exact_lat * 10) / 10.0, 0.1)
    hi = lo + 0.1
    s_lo, s_hi = 1000.0 / lo * cfg.batch * cfg.world, 1000.0 / hi * cfg.batch * cfg.world
    acc = 0.0
    for k in range(1, cfg.iters + 1):
        # error diffusion: keep the running sum of speeds closest to k x target, so any
        # 100 consecutive steps average to the target within ~0.001 samples/s
        if abs(acc + s_lo - k * target_speed) <= abs(acc + s_hi - k * target_speed):
            lat, sp = lo, s_lo
        else:
            lat, sp = hi, s_hi
        acc += sp
        cfg.pace(k)
        tks = cfg.batch * 128 / (lat / 1000.0) / 1000.0
        _w(err, f"INFO:root:[step {k}]\tmlm_loss={10.5 - 3.0 * k / max(cfg.iters, 1) + rng.random() * 0.2:7.5f}"
                f"\tnsp_loss={0.65 + rng.random() * 0.1:5.2f}\tthroughput={tks:.1f}K tks/s"
                f"\tlr={1e-4 * k / max(cfg.iters, 1):.7f} time={lat / 1000:.2f}, latency={lat:.1f} ms/batch")
        cfg.after_iteration(k, err)
    if cfg.rank == cfg.local_rank:
        _w(err, f"INFO:root:[step {cfg.iters}] Saving trainer states to ./ckpt_dir/{cfg.iters:07d}.states.{cfg.rank:02d}.")
    if cfg.local_rank == 0:
        _w(err, f"INFO:root:[step {cfg.iters}] Saving model params to ./ckpt_dir/{cfg.iters:07d}.params.")
    _w(err, f"INFO:root:Train cost={cfg.iters * cfg.step_s:.1f}s")


def emit_mxnet_resnet50(cfg: Config) -> None:
    """gluon-cv train_horovod.py (DLPerf's copy): rank 0 logs per batch, Speed is global."""
    err = sys.stderr
    now = dt.datetime.fromtimestamp(cfg.start).strftime("%H:%M:%S")
    if cfg.rank == 0:
        ns = cfg.extra.get("namespace")  # train_horovod.py: logging.info(args)
        _w(err, "INFO:root:" + (str(ns) if ns is not None else
                f"Namespace(batch_size={cfg.batch}, dtype='float32', log_interval=1, "
                f"model='resnet50_v1b', num_epochs=1, num_batches={cfg.iters})"))
        _w(err, "INFO:root:ResNetV1b(\n  (conv1): Conv2D(3 -> 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)\n"
                "  (fc): Dense(2048 -> 1000, linear)\n)")
    _w(err, f"[{now}] src/operator/nn/./cudnn/./cudnn_algoreg-inl.h:97: Running performance tests to find the best "
            "convolution algorithm, this can take a while... (set the environment variable "
            "MXNET_CUDNN_AUTOTUNE_DEFAULT to 0 to disable)")
    for k in range(1, cfg.iters + 1):
        cfg.pace(k)
        if cfg.rank == 0:
            _w(err, f"INFO:root:Epoch[0] Rank[0] Batch[{k}]\taccuracy={0.001 * k / cfg.iters:f}\tlr={0.001 * k / cfg.iters:f}")
            _w(err, f"INFO:root:Epoch[0] Batch[{k}]\tSpeed: {cfg.speed:.2f} samples/sec")
        cfg.after_iteration(k, err)
    if cfg.rank == 0:
        _w(err, f"INFO:root:Epoch[0] Rank[0] Batch[{cfg.iters}]\tTime cost={cfg.iters * cfg.step_s:.2f}\tTrain-metric=0.002018")
        _w(err, f"INFO:root:Epoch[0]\tSpeed: {cfg.speed:.2f} samples/sec")
        _w(err, "INFO:root:Epoch[0] Rank[0]\tValidation-accuracy=0.001000\tValidation-top_k_accuracy_5=0.005000")


def _dll_ts(cfg: Config, us: int) -> str:
    return str(dt.datetime.fromtimestamp(us // 1_000_000) + dt.timedelta(microseconds=us % 1_000_000))


def emit_pytorch_bert(cfg: Config) -> None:
    """NVIDIA DeepLearningExamples run_pretraining.py: dllogger lines from global rank 0, tqdm on stderr."""
    out, err = sys.stdout, sys.stderr
    fp16 = cfg.precision in ("amp", "fp16")
    device = f"device: cuda:{cfg.local_rank} n_gpu: 1, distributed training: {cfg.world > 1}, 16-bits training: {fp16}"
    if cfg.rank != 0:
        for k in range(1, cfg.iters + 1):
            cfg.pace(k)
            cfg.after_iteration(k, out)
        _w(out, device)
        return
    _w(out, device)
    t0 = cfg.synthetic_us(0)
    ns = cfg.extra.get("namespace")
    config = str(ns) if ns is not None else (f"Namespace(bert_model='bert-base-uncased', fp16={fp16}, "
                                             f"max_steps={float(cfg.iters)}, train_batch_size={cfg.batch})")
    _w(out, f"DLL {_dll_ts(cfg, t0)} - PARAMETER Config : [\"{config}\"] ")
    _w(out, f"DLL {_dll_ts(cfg, t0)} - PARAMETER SEED : 42 ")
    _w(out, f"DLL {_dll_ts(cfg, t0)} - PARAMETER train_start : True ")
    _w(out, f"DLL {_dll_ts(cfg, t0)} - PARAMETER batch_size_per_gpu : {cfg.batch} ")
    base = 11.0
    scale = float(os.environ.get("DLPERF_STANDIN_LOSS_SCALE") or 1.0)
    for k in range(1, cfg.iters + 1):
        cfg.pace(k)
        err.write(f"\rIteration:   0%|          | {k}/1646 [00:{k % 60:02d}<06:21,  3.93it/s]")
        err.flush()
        ts = _dll_ts(cfg, cfg.synthetic_us(k))
        base = max(7.5, base - 0.02)
        loss = base * scale if scale != 1.0 else base
        if k < cfg.iters:
            _w(out, f"DLL {ts} - Training Epoch: 0 Training Iteration: {k}  average_loss : {loss}  "
                    f"step_loss : {loss}  learning_rate : {6e-3 * k / cfg.iters:.5g} ")
        else:
            _w(out, f"DLL {ts} - Training Epoch: 0 Training Iteration: {k}  final_loss : {loss} ")
        cfg.after_iteration(k, out)
    total = cfg.iters * cfg.step_s
    _w(out, f"DLL {_dll_ts(cfg, cfg.synthetic_us(cfg.iters))} -  e2e_train_time : {total:f}  "
            f"training_sequences_per_second : {cfg.speed}  final_loss : {loss}  raw_train_time : {total:f} ")


def emit_tensorflow_bert(cfg: Config) -> None:
    """tensorflow/models r2.3.0 model_training_utils: absl lines on stderr from every worker process."""
    err = sys.stderr
    tid = 140286429083456
    t0 = dt.datetime.fromtimestamp(cfg.start)
    _w(err, f"{t0:%Y-%m-%d %H:%M:%S.%f}: I tensorflow/stream_executor/platform/default/dso_loader.cc:48] "
            "Successfully opened dynamic library libcudart.so.10.1")
    _w(err, f"I{t0:%m%d %H:%M:%S.%f} {tid} mirrored_strategy.py:341] Using MirroredStrategy with devices "
            f"({', '.join(repr(f'/job:localhost/replica:0/task:0/device:GPU:{i}') for i in range(max(cfg.world // cfg.nodes, 1)))})")
    for k in range(1, cfg.iters + 1):
        cfg.pace(k)
        us = cfg.synthetic_us(k)
        t = dt.datetime.fromtimestamp(us // 1_000_000) + dt.timedelta(microseconds=us % 1_000_000)
        _w(err, f"I{t:%m%d %H:%M:%S}.{t.microsecond:06d} {tid} model_training_utils.py:444] Train Step: {k}/{cfg.iters}  "
                f"/ loss = {11.0 - 2.5 * k / cfg.iters!r}  masked_lm_accuracy = 0.010106  lm_example_loss = 10.008558  "
                "next_sentence_accuracy = 0.484400  next_sentence_loss = 0.723353")
        cfg.after_iteration(k, err)
    t = dt.datetime.fromtimestamp(cfg.synthetic_us(cfg.iters) / 1e6)
    _w(err, f"I{t:%m%d %H:%M:%S.%f} {tid} model_training_utils.py:96] Training Summary: ")
    _w(err, f"{{'total_training_steps': {cfg.iters}, 'train_loss': 8.59}}")
    _w(sys.stdout, f"***** Number of cores used :  {max(cfg.world // cfg.nodes, 1)}")


def emit_megatron_gpt(cfg: Config) -> None:
    """Megatron-LM training_log: iteration lines from the last rank, memory line from rank 0 (stdout)."""
    out = sys.stdout
    last = cfg.world - 1
    lat = cfg.latency_ms if cfg.latency_ms else round(cfg.global_batch * 1000.0 / cfg.speed, 2)
    if cfg.rank == 0:
        lay = cfg.extra.get("layout") or {"dp": cfg.world, "tp": 1, "pp": 1}
        _w(out, f"using world size: {cfg.world}, data-parallel-size: {lay['dp']}, tensor-model-parallel size: "
                f"{lay['tp']}, pipeline-model-parallel size: {lay['pp']} ")
        _w(out, "------------------------ arguments ------------------------")
        _w(out, f"  global_batch_size ............................... {cfg.global_batch}")
        _w(out, f"  train_iters ..................................... {cfg.iters}")
        _w(out, f"  log_interval .................................... {cfg.log_interval}")
        _w(out, "-------------------- end of arguments ---------------------")
        _w(out, f"[before the start of training step] datetime: {dt.datetime.fromtimestamp(cfg.start):%Y-%m-%d %H:%M:%S} ")
    line_no = 0
    for k in range(1, cfg.iters + 1):
        cfg.pace(k)
        if k % cfg.log_interval == 0 or k == cfg.iters:
            line_no += 1
            if cfg.rank == last:
                # the first line includes start-up; the rule always drops it
                v = round(lat * 1.5, 1) if line_no == 1 else _quantised(lat, line_no - 1, 0.1)
                lm = "" if line_no == 1 else f" lm loss: {10.9 - 0.8 * k / cfg.iters:.6E} |"
                _w(out, f" iteration {k:8d}/{cfg.iters:8d} | consumed samples: {k * cfg.global_batch:12d} | "
                        f"elapsed time per iteration (ms): {v:.1f} | learning rate: {1.5e-4 * k / 3200:.3E} | "
                        f"global batch size: {cfg.global_batch:5d} |{lm} loss scale: 1048576.0 | "
                        "number of skipped iterations:   0 | number of nan iterations:   0 |")
                _w(out, "time (ms) | forward-compute: 124.75 | backward-compute: 287.26 | optimizer: 15.79 | batch-generator: 1.02")
            if cfg.rank == 0 and line_no == 2:
                _w(out, f"[Rank 0] (after {k} iterations) memory (MB) | allocated: {cfg.memory_mb * 0.228:.4f} | "
                        f"max allocated: {cfg.memory_mb * 0.893:.4f} | reserved: {cfg.memory_mb:.1f} | "
                        f"max reserved: {cfg.memory_mb:.1f}")
        cfg.after_iteration(k, out)
    if cfg.rank == 0:
        _w(out, f"[after training is done] datetime: {dt.datetime.fromtimestamp(cfg.start + cfg.iters * cfg.step_s):%Y-%m-%d %H:%M:%S} ")


EMITTERS = {
    "mxnet_bert": emit_mxnet_bert,
    "mxnet_resnet50": emit_mxnet_resnet50,
    "pytorch_bert": emit_pytorch_bert,
    "tensorflow_bert": emit_tensorflow_bert,
    "megatron_gpt": emit_megatron_gpt,
}


def run(cfg: Config) -> int:
    if cfg.speed <= 0 or cfg.iters < 1 or cfg.world < 1 or cfg.batch < 1:
        sys.stderr.write(f"dlperf-standin: invalid configuration (speed {cfg.speed}, iters {cfg.iters}, "
                         f"world {cfg.world}, batch {cfg.batch})\n")
        return 2
    if hasattr(signal, "SIGPIPE"):  # `... | head` ends us quietly, like a real trainer
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    record(cfg)
    burners = burn_cores(int(os.environ.get("DLPERF_STANDIN_BURN_CORES") or 0))
    try:
        EMITTERS[cfg.fmt](cfg)
    finally:
        for b in burners:
            b.terminate()
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def _spin() -> None:
    while True:
        pass


def burn_cores(n: int) -> list:
    """``n`` child processes that keep a core busy each until terminated (daemonic: they end with us)."""
    if n <= 0:
        return []
    import multiprocessing

    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(max(0, n))]
    for pr in procs:
        pr.start()
    return procs


# --------------------------------------------------------------------------- shims (dlperf_standin_shims.py)
def shim_main(fmt: str, argv: list[str] | None = None) -> int:
    """Entry point of the stand-in training scripts (strict upstream contract; see dlperf_standin_shims)."""
    from dlperf_standin_shims import shim_main as _shim_main

    return _shim_main(fmt, argv)


# --------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="dlperf-standin",
        description="Print a deep-learning framework's real training-log format at a chosen speed "
                    "(a GPU-free stand-in for benchmark tests). Numbers parse back, with DLPerf's rules, "
                    "to the configured speed rounded to 2 decimals.")
    p.add_argument("--format", required=True, choices=FORMATS, help="which framework's log format to print")
    p.add_argument("--speed", type=float, default=None,
                   help="global samples/s (default: from DLPERF_STANDIN_* environment, else 100 x world)")
    p.add_argument("--latency-ms", type=float, default=None, help="megatron_gpt: ms per iteration")
    p.add_argument("--iters", type=int, default=120, help="iterations (steps/batches) to print")
    p.add_argument("--rank", type=int, default=0, help="global rank of this process")
    p.add_argument("--world", type=int, default=1, help="number of GPUs (ranks) in the job")
    p.add_argument("--local-rank", type=int, default=None, help="rank within the node (default: --rank)")
    p.add_argument("--nodes", type=int, default=1, help="number of nodes in the job")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per device")
    p.add_argument("--global-batch", type=int, default=None, help="global batch (default batch-size x world)")
    p.add_argument("--log-interval", type=int, default=10, help="megatron_gpt: iterations per log line")
    p.add_argument("--precision", default="fp32", choices=("fp32", "amp"))
    p.add_argument("--hang-after", type=int, default=None, help="stop making progress after iteration K")
    p.add_argument("--crash-after", type=int, default=None, help="print a Traceback and exit after iteration K")
    p.add_argument("--exit-code", type=int, default=1, help="exit status used by --crash-after")
    p.add_argument("--time-scale", "--step-time-scale", dest="time_scale", type=float, default=None,
                   help="real sleep per step = synthetic step time x this (0 = no sleeping; default 1)")
    p.add_argument("--record", default=None, help="append one JSON line describing this rank to this file")
    a = p.parse_args(argv)
    from dlperf_standin_shims import common_env, speed_from_env

    env = common_env()
    speed = a.speed if a.speed is not None else speed_from_env(a.world, a.nodes)
    cfg = Config(fmt=a.format, speed=round(speed, 2), latency_ms=a.latency_ms, iters=a.iters, rank=a.rank,
                 world=a.world, local_rank=a.local_rank, nodes=a.nodes, batch=a.batch_size,
                 global_batch=a.global_batch, log_interval=a.log_interval, precision=a.precision,
                 hang_after=a.hang_after, crash_after=a.crash_after, exit_code=a.exit_code,
                 time_scale=a.time_scale if a.time_scale is not None else env["time_scale"],
                 memory_mb=env["memory_mb"], record=a.record or env["record"],
                 argv=["dlperf-standin"] + list(sys.argv[1:] if argv is None else argv))
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
