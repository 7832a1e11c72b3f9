"""The guard before launch (issue 24.4): what a built command says against the cell it measures.

A framework's ``launch()`` builds the command from the cell, but launcher settings (``extra_args``,
``config_file``, ``model``, ``data``...) can change what the entry point really trains. Before any
GPU time is spent, :func:`check` reads the script's own flags back from the command (the last
occurrence wins, as argparse and absl do) and compares what the entry point would train (model,
precision, batch, accumulation, world size, data) with the cell. A mismatch refuses the cell with
one line naming the flag, what it says and what the cell needs.

The rules are the upstream entry points' own readings of those flags at the seeds' commits
(docs/launch.md): MXNet casts the model to ``--dtype`` (a NumPy dtype name; ``float16`` = AMP);
gluon-nlp's ``--model`` names the size (``bert_12_768_12`` / ``bert_24_1024_16``) and needs at least
one ``--data`` file per worker; DLE trains whatever ``--config_file`` describes (its own
``bert_config.json`` is BERT-large), divides ``--train_batch_size`` by
``--gradient_accumulation_steps`` and trains AMP with ``--fp16`` / ``--amp``; tensorflow/models'
``--dtype`` is fp16|bf16|fp32 and ``--train_batch_size`` is the global batch; Megatron's
``--micro-batch-size`` is per GPU and ``--fp16`` / ``--bf16`` pick the precision.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from dlperf_tasks.frameworks._precision import NUMPY_FLOATS, TF_DTYPES
from dlperf_tasks.frameworks.argcheck import flag_problems
from dlperf_tasks.core.model import Cell

#: the script each framework's launch runs (its flags follow it in the command)
SCRIPTS = {"mxnet_bert": "run_pretraining.py", "mxnet_resnet50": "train_horovod.py", "pytorch_bert": "run_pretraining.py",
           "tensorflow_bert": "run_pretraining.py", "megatron_gpt": "pretrain_gpt.py",
           "megatron_bridge": "run_script.py", "torchtitan_llama": "torchtitan.train"}
GLUON_NLP_SIZES = {"bert_12_768_12": "base", "bert_24_1024_16": "large"}
#: DLE's own config next to run_pretraining.py (PyTorch/LanguageModeling/BERT/bert_config.json) is BERT-large
DLE_OWN_CONFIG = ("bert_config.json", "large")


class LaunchGuardError(ValueError):
    """The command would train something other than the cell (refused before launch)."""


def script_flags(argv: list[str], script: str) -> dict[str, str | bool]:
    """``--name value`` / ``--name=value`` / ``--flag`` after ``script`` in ``argv`` (last one wins)."""
    start = next((i + 1 for i, a in enumerate(argv) if posixpath.basename(a) == script), None)
    if start is None:
        return {}
    out: dict[str, str | bool] = {}
    i, words = start, argv
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("--"):
            continue
        name, eq, value = w[2:].partition("=")
        name = name.replace("-", "_")
        if eq:
            out[name] = value
        elif i < len(words) and not words[i].startswith("--"):
            out[name], i = words[i], i + 1
        else:
            out[name] = True
    return out


def _size_of_model(cell: Cell) -> str | None:
    m = (cell.model or "").lower()
    return "large" if "large" in m else "base" if "base" in m else None


def _int(flags: Mapping, name: str) -> int | None:
    v = flags.get(name)
    try:
        return int(v) if isinstance(v, str) else None
    except ValueError:
        return None


def _want(problems: list[str], flag: str, have, want, why: str) -> None:
    if have is not None and have != want:
        problems.append(f"{flag} says {have}, the cell needs {want} ({why})")


def check(framework: str, cell: Cell, argv: list[str], settings: Mapping | None = None) -> list[str]:
    """What the command would train that the cell does not say (empty: launch it)."""
    script = str((settings or {}).get("script") or SCRIPTS.get(framework, ""))
    flags = script_flags(argv, script) if script else {}
    if not flags:
        return []
    topo, bsz, size = cell.topology, cell.batch_size_per_device, _size_of_model(cell)
    acc = int(getattr(cell, "gradient_accumulation_steps", None) or 1)
    p: list[str] = []
    if framework in ("mxnet_bert", "mxnet_resnet50"):
        dtype = flags.get("dtype")
        if isinstance(dtype, str):
            prec = NUMPY_FLOATS.get(dtype)
            if prec is None:
                p.append(f"--dtype {dtype} is not a NumPy dtype name: MXNet's cast refuses it (float16 = AMP)")
            else:
                _want(p, "--dtype", dtype, "float16" if cell.precision == "amp" else "float32",
                      f"precision {cell.precision}")
    if framework == "mxnet_bert":
        model = flags.get("model")
        if size and isinstance(model, str) and GLUON_NLP_SIZES.get(model) not in (None, size):
            p.append(f"--model {model} is BERT-{GLUON_NLP_SIZES[model]}, the cell's model is {cell.model}")
        _want(p, "--total_batch_size", _int(flags, "total_batch_size"), bsz * topo.world_size,
              f"{bsz} x {topo.world_size} GPUs")
        _want(p, "--accumulate", _int(flags, "accumulate"), acc, "accumulation")
        data = flags.get("data")
        if not isinstance(data, str) or not data:
            p.append("no --data: gluon-nlp builds the model and exits without training")
        elif not any(c in data for c in "*?[") and len([d for d in data.split(",") if d.strip()]) < topo.world_size:
            p.append(f"--data names {len(data.split(','))} file(s) for {topo.world_size} workers: gluon-nlp asserts "
                     "at least one file per worker")
    elif framework == "mxnet_resnet50":
        _want(p, "--batch-size", _int(flags, "batch_size"), bsz, "per GPU")
    elif framework == "pytorch_bert":
        amp = bool(flags.get("fp16") or flags.get("amp"))
        if amp != (cell.precision == "amp"):
            p.append(f"{'--fp16/--amp is set' if amp else 'neither --fp16 nor --amp is set'}, the cell's precision "
                     f"is {cell.precision}")
        _want(p, "--train_batch_size", _int(flags, "train_batch_size"), bsz * acc, f"{bsz} per GPU x {acc} accumulation")
        _want(p, "--gradient_accumulation_steps", _int(flags, "gradient_accumulation_steps"), acc, "accumulation")
        p += _bert_config(flags.get("config_file"), flags.get("bert_model"), size, cell, settings)
    elif framework == "tensorflow_bert":
        dtype = flags.get("dtype", "fp32")
        if isinstance(dtype, str):
            if dtype not in TF_DTYPES:
                p.append(f"--dtype={dtype} is not one of fp16|bf16|fp32 (tensorflow/models' enum)")
            else:
                _want(p, "--dtype", dtype, "fp16" if cell.precision == "amp" else "fp32", f"precision {cell.precision}")
        _want(p, "--train_batch_size", _int(flags, "train_batch_size"), bsz * topo.world_size,
              f"global: {bsz} x {topo.world_size} GPUs")
        _want(p, "--num_gpus", _int(flags, "num_gpus"), topo.gpus_per_node, "GPUs per node")
        if not flags.get("input_files"):
            p.append("no --input_files: tensorflow/models fails on input_file_pattern.split(',')")
        p += _bert_config(flags.get("bert_config_file"), None, size, cell, settings)
    elif framework == "megatron_gpt":
        _want(p, "--micro-batch-size", _int(flags, "micro_batch_size"), bsz, "per GPU")
    return p + flag_problems(framework, cell, argv, settings)


def _bert_config(path, bert_model, size: str | None, cell: Cell, settings) -> list[str]:
    out: list[str] = []
    if size and isinstance(bert_model, str) and ("large" if "large" in bert_model else "base") != size:
        out.append(f"--bert_model={bert_model}, the cell's model is {cell.model}")
    if not (size and isinstance(path, str)):
        return out
    workdir = str((settings or {}).get("workdir") or "")
    name, known = DLE_OWN_CONFIG
    if posixpath.basename(path) == name and (not workdir or posixpath.dirname(path) == workdir.rstrip("/")
                                             or posixpath.basename(posixpath.dirname(path)) == "bert"):
        if known != size:
            out.append(f"config {path} is the upstream repository's own {name} (BERT-{known}: hidden 1024, 24 layers, "
                       f"16 heads); the cell's model is {cell.model}. The entry point trains what the config says")
    return out


def guard(framework: str, cell: Cell, argv: list[str], settings: Mapping | None = None) -> None:
    """Raise :class:`LaunchGuardError` with one line when the command does not train the cell."""
    problems = check(framework, cell, argv, settings)
    if problems:
        raise LaunchGuardError(f"pre-launch guard refused {cell.topology.name} {cell.precision} bz{cell.batch_size_per_device}: "
                               + "; ".join(problems))
