"""Entry points of the stand-in training scripts (``run_pretraining.py``, ``pretrain_gpt.py``...).

:func:`shim_main` parses the real flags with the upstream script's own contract
(:mod:`dlperf_standin_contract`: unknown flag -> argparse's exit 2; failed asserts -> the real
exception, exit 1), takes rank/world from the launcher's environment and the speed from the
``DLPERF_STANDIN_*`` variables, prints what a real cluster prints around the training log
(:mod:`dlperf_standin_cluster`: NCCL INFO lines, OpenMPI notices) and then the log itself.
"""

from __future__ import annotations

import os
import sys

import dlperf_standin as S
import dlperf_standin_contract as C


def _env_num(name: str, cast=float, default=None):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return cast(v)
    except ValueError:
        sys.stderr.write(f"dlperf-standin: ignoring {name}={v!r} (not a number)\n")
        return default


def _faults_for(rank: int) -> dict:
    out = {}
    for kind in ("HANG", "CRASH"):
        after = _env_num(f"DLPERF_STANDIN_{kind}_AFTER", int)
        who = _env_num(f"DLPERF_STANDIN_{kind}_RANK", int)
        if after is not None and (who is None or who == rank):
            out[f"{kind.lower()}_after"] = after
    return out


def speed_from_env(world: int, nodes: int) -> float:
    gpn = max(world // max(nodes, 1), 1)
    for name in (f"DLPERF_STANDIN_SPEED_{nodes}N{gpn}G", "DLPERF_STANDIN_SPEED"):
        v = _env_num(name)
        if v is not None:
            return round(v, 2)
    per_gpu = _env_num("DLPERF_STANDIN_SPEED_PER_GPU", default=100.0)
    eff = _env_num("DLPERF_STANDIN_SCALING", default=1.0) if world > 1 else 1.0
    return round(per_gpu * world * eff, 2)


def latency_from_env(world: int, nodes: int) -> float | None:
    gpn = max(world // max(nodes, 1), 1)
    for name in (f"DLPERF_STANDIN_LATENCY_MS_{nodes}N{gpn}G", "DLPERF_STANDIN_LATENCY_MS"):
        v = _env_num(name)
        if v is not None:
            return round(v, 2)
    return None


def rank_env() -> dict:
    """Rank / world / nodes from the launcher's environment (OpenMPI or torch.distributed.launch)."""
    e = os.environ
    if "OMPI_COMM_WORLD_RANK" in e:
        world = int(e.get("OMPI_COMM_WORLD_SIZE", "1"))
        local_size = int(e.get("OMPI_COMM_WORLD_LOCAL_SIZE", str(world)))
        return {"rank": int(e["OMPI_COMM_WORLD_RANK"]), "world": world,
                "local_rank": int(e.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")),
                "nodes": max(world // max(local_size, 1), 1)}
    world = int(e.get("WORLD_SIZE", "1"))
    local_world = int(e.get("LOCAL_WORLD_SIZE", str(world)))
    return {"rank": int(e.get("RANK", "0")), "world": world, "local_rank": int(e.get("LOCAL_RANK", "0")),
            "nodes": max(world // max(local_world, 1), 1)}


def common_env() -> dict:
    return {
        "time_scale": _env_num("DLPERF_STANDIN_TIME_SCALE", default=1.0),
        "exit_code": _env_num("DLPERF_STANDIN_EXIT_CODE", int, 1),
        "memory_mb": _env_num("DLPERF_STANDIN_MEMORY_MB", default=13694.0),
        "record": os.environ.get("DLPERF_STANDIN_RECORD"),
    }


def _settings(fmt: str, ns, r: dict) -> dict:
    """Emitter settings from the parsed real flags (raises ContractError like the real script)."""
    if fmt == "mxnet_bert":
        prec = C.mxnet_precision(ns.dtype, "run_pretraining.py: model.cast(args.dtype)")
        if not ns.data:  # gluon-nlp: `if args.data:` ... the model is built, nothing trains, exit 0
            return dict(idle=True, namespace=ns)
        files = C.check_mxnet_bert(ns, r["world"])
        return dict(batch=max(ns.total_batch_size // r["world"] // ns.accumulate, 1), iters=ns.num_steps,
                    precision=prec, namespace=ns, data_files=files, work=C.work_factor(None, ns.model))
    if fmt == "mxnet_resnet50":
        prec = C.mxnet_precision(ns.dtype, "train_horovod.py: net.cast(args.dtype)")
        return dict(batch=ns.batch_size, iters=getattr(ns, "num_batches", 0) or 120, precision=prec, namespace=ns)
    if fmt == "pytorch_bert":
        doc = C.check_pytorch_bert(ns)
        acc = ns.gradient_accumulation_steps
        ns.fp16 = ns.fp16 or ns.amp
        ns.train_batch_size //= acc  # DLE: setup_training() divides, then logs Config
        if ns.local_rank is not None:
            r["local_rank"] = int(ns.local_rank)
        return dict(batch=ns.train_batch_size, global_batch=ns.train_batch_size * acc * r["world"],
                    iters=int(ns.max_steps), precision="amp" if ns.fp16 else "fp32", namespace=ns, model_config=doc,
                    work=C.work_factor(doc))
    if fmt == "tensorflow_bert":
        doc = C.check_tensorflow_bert(ns)
        nodes = len([h for h in (ns.worker_hosts or "").split(",") if h]) or 1
        world = ns.num_gpus * nodes
        r.update(rank=max(ns.task_index, 0), world=world, local_rank=0, nodes=nodes)
        return dict(batch=max(ns.train_batch_size // world, 1), global_batch=ns.train_batch_size,
                    iters=ns.num_steps_per_epoch * ns.num_train_epochs,
                    precision={"fp16": "amp", "bf16": "bf16"}.get(ns.dtype, "fp32"), model_config=doc,
                    work=C.work_factor(doc))
    if fmt == "megatron_gpt":
        sizes = C.check_megatron_gpt(ns, r["world"])
        if ns.local_rank is not None:
            r["local_rank"] = ns.local_rank
        return dict(batch=ns.micro_batch_size, global_batch=sizes["global_batch"], iters=ns.train_iters or 130,
                    log_interval=ns.log_interval, precision="amp", layout=sizes)
    raise SystemExit(f"dlperf-standin: unknown format {fmt!r}")


def shim_main(fmt: str, argv: list[str] | None = None) -> int:
    """Entry point of the stand-in training scripts: the real flags of ``fmt``, strictly."""
    import dlperf_standin_cluster as cluster

    argv = list(sys.argv[1:] if argv is None else argv)
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else f"{fmt}.py"
    r = rank_env()
    ns = C.parse(fmt, argv, script)  # exits 2 (argparse) / 1 (absl) like the real script
    try:
        kw = _settings(fmt, ns, r)
    except C.ContractError as exc:
        return C.report(exc, script)
    extra = {k: kw.pop(k) for k in ("namespace", "model_config", "layout", "data_files") if k in kw}
    if kw.pop("idle", False):  # the real script exits 0 without training (e.g. gluon-nlp with no --data)
        sys.stderr.write(f"INFO:root:{extra.get('namespace')}\n")
        return 0
    work = kw.pop("work", 1.0)
    kw.update(r, fmt=fmt, argv=[sys.argv[0]] + argv)
    # another model than the speed was configured for trains slower: a test sees a wrong launch
    kw["speed"] = round(speed_from_env(r["world"], r["nodes"]) / work, 2)
    if fmt == "megatron_gpt":
        kw["latency_ms"] = latency_from_env(r["world"], r["nodes"])
        if kw["latency_ms"] is None:
            kw["latency_ms"] = round(kw["global_batch"] * 1000.0 / kw["speed"], 2)
    kw.update(common_env())
    kw.update(_faults_for(r["rank"]))
    cfg = S.Config(**kw)
    cfg.extra = extra
    cluster.preamble(cfg)
    return S.run(cfg)
