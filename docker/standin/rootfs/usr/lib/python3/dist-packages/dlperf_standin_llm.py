"""Stand-ins for the LLM entry points: torchtitan's ``-m torchtitan.train``, Megatron-Bridge's
``scripts/performance/run_script.py`` (nccl-tests' ``all_reduce_perf``: ``dlperf_standin_nccl.py``).

Each parses its command line against the upstream contract kept as data
(``dlperf_standin_contracts/<name>.json``, read from the pinned commits by tools/gen_contracts.py):
an unknown option exits 2 as the real parsers do (tyro for torchtitan, argparse for Megatron-Bridge;
``run_script.py`` reads argparse's leftovers as ``key=value`` config overrides, so a leftover option
is refused by name). The log lines have the upstream wording (formats, not code):

* torchtitan ``torchtitan/components/metrics.py``: ``step: N  loss: ...  grad_norm: ...  memory:
  ...GiB(...%)  tps: 1,234  tflops: ...  mfu: ...%`` with the ``[titan]`` logger prefix, rank 0.
* Megatron-Bridge ``training/utils/train_utils.py``: `` [date] iteration N/M | consumed samples: ...
  | elapsed time per iteration (ms): ... | throughput per GPU (TFLOP/s/GPU): ... | ... | number of
  skipped iterations: 0 | number of nan iterations: 0 |`` from the last rank; after the first two logged
  iterations rank 0 prints the allocator report ``[Rank 0] (after N iterations) memory (GB) | mem-...-gigabytes: X | ...``.

Speed: ``DLPERF_STANDIN_TPS_PER_GPU`` (tokens/s per GPU, default 1000); ``DLPERF_STANDIN_TFLOPS``
(what the log prints as TFLOP/s per GPU, default 400).
"""

from __future__ import annotations

import datetime as dt
import sys

import dlperf_standin as S
import dlperf_standin_contract as C
from dlperf_standin_shims import _env_num, common_env, rank_env


def _parse(fmt: str, argv: list[str], prog: str, known: bool = False):
    parser = C.build_parser(C.load(fmt), prog)
    return parser.parse_known_args(argv) if known else (parser.parse_args(argv), [])


def _cfg(fmt: str, steps: int, tokens_per_step: int, r: dict) -> S.Config:
    tps = _env_num("DLPERF_STANDIN_TPS_PER_GPU", default=1000.0)
    speed = tps * r["world"] / max(tokens_per_step, 1) * max(tokens_per_step, 1)  # tokens/s, whole job
    cfg = S.Config(fmt=fmt, speed=speed, iters=steps, batch=1, global_batch=tokens_per_step, **r, **common_env())
    cfg.extra["tps_per_gpu"] = tps
    cfg.extra["tflops"] = _env_num("DLPERF_STANDIN_TFLOPS", default=400.0)
    return cfg


def torchtitan_main(argv: list[str] | None = None) -> int:
    """``python -m torchtitan.train --module M --config C [--section.field value ...]``."""
    ns, _ = _parse("torchtitan_llama", list(sys.argv[1:] if argv is None else argv), "torchtitan.train")
    r = rank_env()
    dp = r["world"] // (int(getattr(ns, "parallelism.tensor_parallel_degree") or 1)
                        * int(getattr(ns, "parallelism.context_parallel_degree") or 1)
                        * int(getattr(ns, "parallelism.pipeline_parallel_degree") or 1) or 1)
    if dp < 1 or r["world"] % dp:
        sys.stderr.write(f"ValueError: parallel degrees do not divide world size {r['world']}\n")
        return 1
    steps = int(getattr(ns, "training.steps") or 10000)
    micro = int(getattr(ns, "training.num_tokens_per_microbatch_per_dp_rank") or 16384)
    cfg = _cfg("torchtitan", steps, micro * dp, r)
    out = sys.stdout
    for k in range(1, steps + 1):
        cfg.pace(k)
        if cfg.rank == 0:
            stamp = dt.datetime.fromtimestamp(cfg.synthetic_us(k) / 1e6).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
            tps = cfg.extra["tps_per_gpu"] * (0.4 if k == 1 else 1.0)  # step 1 compiles and warms up
            S._w(out, f"[titan] {stamp} - root - INFO - step: {k:2}  loss: {11.0 - 3.0 * k / steps:8.5f}  "
                      f"grad_norm: {1.5:7.4f}  memory: {cfg.memory_mb / 1024:5.2f}GiB({cfg.memory_mb / 819.2:.2f}%)  "
                      f"tps: {round(tps):,}  tflops: {cfg.extra['tflops']:,.2f}  mfu: {cfg.extra['tflops'] / 9.89:.2f}%")
        cfg.after_iteration(k, out)
    if cfg.rank == 0:
        S._w(out, "[titan] - root - INFO - Training completed")
    return 0


def megatron_bridge_main(argv: list[str] | None = None) -> int:
    """``run_script.py -m FAMILY -mr RECIPE -g GPU -c DTYPE ... [key=value overrides]``."""
    ns, rest = _parse("megatron_bridge", list(sys.argv[1:] if argv is None else argv), "run_script.py", known=True)
    bad = [w for w in rest if w.startswith("-") or "=" not in w]
    if bad:
        sys.stderr.write(f"ValueError: cannot parse config override {bad[0]!r} (expected key=value)\n")
        return 1
    r = rank_env()
    tp, pp, cp = (int(getattr(ns, k) or 1) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                     "context_parallel_size"))
    if r["world"] % (tp * pp * cp):
        sys.stderr.write(f"AssertionError: world size {r['world']} is not divisible by TP*PP*CP = {tp * pp * cp}\n")
        return 1
    gb, seq, steps = int(ns.global_batch_size or 128), int(ns.seq_length or 8192), int(ns.max_steps or 100)
    cfg = _cfg("megatron_bridge", steps, gb * seq, r)
    step_ms = gb * seq / (cfg.extra["tps_per_gpu"] * r["world"]) * 1000.0
    out = sys.stdout
    for k in range(1, steps + 1):
        cfg.pace(k)
        if cfg.rank == r["world"] - 1:
            ms = step_ms * (3.0 if k == 1 else 1.0)
            stamp = dt.datetime.fromtimestamp(cfg.synthetic_us(k) / 1e6).strftime("%Y-%m-%d %H:%M:%S")
            S._w(out, f" [{stamp}] iteration {k:8d}/{steps:8d} | consumed samples: {k * gb:12d} | "
                      f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): "
                      f"{cfg.extra['tflops'] / (3.0 if k == 1 else 1.0):.1f} | learning rate: {3e-4 * k / steps:.6E} | "
                      f"global batch size: {gb:5d} | lm loss: {11.0 - 3.0 * k / steps:.6E} | loss scale: 1.0 | "
                      f"grad norm: 1.500 | number of skipped iterations:   0 | number of nan iterations:   0 |")
        if cfg.rank == 0 and k <= 2:
            S._w(out, _bridge_memory_report(k, cfg.memory_mb))
        cfg.after_iteration(k, out)
    return 0


def _gb(mib: float) -> float:
    """Bytes / 1e9 to 5 significant digits, as Megatron-Bridge's report_memory rounds them."""
    return float(f"{mib * 2**20 / 1e9:.5g}")


def _bridge_memory_report(k: int, reserved_mib: float) -> str:
    """The allocator report after the first two logged iterations (data-parallel rank 0), with
    ``MEMORY_KEYS``' names; the peak reserved is DLPERF_STANDIN_MEMORY_MB."""
    fields = {"mem-allocated-gigabytes": _gb(reserved_mib * 0.6), "mem-active-gigabytes": _gb(reserved_mib * 0.6),
              "mem-inactive-gigabytes": _gb(reserved_mib * 0.01), "mem-reserved-gigabytes": _gb(reserved_mib),
              "mem-max-allocated-gigabytes": _gb(reserved_mib * 0.9), "mem-max-active-gigabytes": _gb(reserved_mib * 0.9),
              "mem-max-inactive-gigabytes": _gb(reserved_mib * 0.05), "mem-max-reserved-gigabytes": _gb(reserved_mib),
              "mem-alloc-retires": 0, "mem-allocated-count": 4123}
    return f"[Rank 0] (after {k} iterations) memory (GB)" + "".join(f" | {name}: {v}" for name, v in fields.items())
