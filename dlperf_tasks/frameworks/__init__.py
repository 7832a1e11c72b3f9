"""Framework modules: one per framework log format / launcher, same shape (see base.py)."""

from __future__ import annotations

import importlib

from dlperf_tasks.frameworks.base import Framework

# name -> "module:Class"; imported lazily so the CLI and DAG parsing stay fast.
_MODULES = {
    "mxnet_bert": "dlperf_tasks.frameworks.mxnet_bert:MxnetBert",
    "mxnet_resnet50": "dlperf_tasks.frameworks.mxnet_resnet50:MxnetResnet50",
    "pytorch_bert": "dlperf_tasks.frameworks.pytorch_bert:PytorchBert",
    "tensorflow_bert": "dlperf_tasks.frameworks.tensorflow_bert:TensorflowBert",
    "megatron_gpt": "dlperf_tasks.frameworks.megatron_gpt:MegatronGpt",
    "smoke_bert": "dlperf_tasks.frameworks.smoke_bert:SmokeBert",
}

_CACHE: dict[str, Framework] = {}


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> Framework:
    """Return the framework instance registered under ``name``."""
    if name not in _MODULES:
        raise KeyError(f"unknown framework {name!r}; known: {', '.join(names())}")
    if name not in _CACHE:
        mod, cls = _MODULES[name].split(":")
        _CACHE[name] = getattr(importlib.import_module(mod), cls)()
    return _CACHE[name]
