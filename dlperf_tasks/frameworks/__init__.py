"""Framework modules: one per framework log format / launcher, same shape (see base.py).

Adding a framework is one module: ``dlperf_tasks/frameworks/<name>.py``, or, for a site
catalog, ``<catalog dir>/frameworks/<name>.py`` next to the suite YAMLs (``$DLPERF_CATALOG_PATH``).
The module defines one :class:`Framework` subclass whose ``name`` is ``<name>``; ``get(name)``
finds it there when ``name`` is not one of the built-in names below.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

from dlperf_tasks.core.catalog_path import site_dirs
from dlperf_tasks.frameworks.base import Framework

# name -> "module:Class"; imported lazily so the CLI and DAG parsing stay fast.
_MODULES = {
    "mxnet_bert": "dlperf_tasks.frameworks.mxnet_bert:MxnetBert",
    "mxnet_resnet50": "dlperf_tasks.frameworks.mxnet_resnet50:MxnetResnet50",
    "pytorch_bert": "dlperf_tasks.frameworks.pytorch_bert:PytorchBert",
    "tensorflow_bert": "dlperf_tasks.frameworks.tensorflow_bert:TensorflowBert",
    "megatron_gpt": "dlperf_tasks.frameworks.megatron_gpt:MegatronGpt",
    "megatron_bridge": "dlperf_tasks.frameworks.megatron_bridge:MegatronBridge",
    "torchtitan_llama": "dlperf_tasks.frameworks.torchtitan_llama:TorchtitanLlama",
    "smoke_bert": "dlperf_tasks.frameworks.smoke_bert:SmokeBert",
    "nccl_probe": "dlperf_tasks.frameworks._nccl_probe:NcclProbe",  # the interconnect probe (engine/probe.py)
}

_CACHE: dict[str, Framework] = {}
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def names() -> list[str]:
    """Built-in names, plus framework modules found in the package or a catalog's ``frameworks/``."""
    found = set(_MODULES)
    here = Path(__file__).resolve().parent
    try:
        dirs = [Path(d) / "frameworks" for d in site_dirs()]
    except Exception:  # noqa: BLE001 - a broken catalog path is reported by the catalog itself
        dirs = []
    for d in [here, *dirs]:
        found |= {p.stem for p in d.glob("*.py") if _NAME.match(p.stem) and p.stem != "base"} if d.is_dir() else set()
    return sorted(found)


def _module_file(name: str):
    """``<name>.py`` in this package, else in a catalog directory's ``frameworks/``."""
    own = Path(__file__).resolve().parent / f"{name}.py"
    if own.is_file():
        return own
    for d in site_dirs():
        p = Path(d) / "frameworks" / f"{name}.py"
        if p.is_file():
            return p
    return None


def _discover(name: str) -> Framework | None:
    path = _module_file(name) if _NAME.match(name) else None
    if path is None:
        return None
    if path.parent == Path(__file__).resolve().parent:
        module = importlib.import_module(f"{__name__}.{name}")
    else:
        spec = importlib.util.spec_from_file_location(f"dlperf_site_frameworks.{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    found = [c for _, c in sorted(vars(module).items())
             if isinstance(c, type) and issubclass(c, Framework) and c is not Framework and getattr(c, "name", "") == name]
    return found[0]() if found else None


def get(name: str) -> Framework:
    """Return the framework instance registered (or found, see the module docstring) under ``name``."""
    if name in _CACHE:
        return _CACHE[name]
    if name in _MODULES:
        mod, cls = _MODULES[name].split(":")
        _CACHE[name] = getattr(importlib.import_module(mod), cls)()
        return _CACHE[name]
    fw = _discover(name)
    if fw is None:
        raise KeyError(f"unknown framework {name!r}; known: {', '.join(names())} (or a module "
                       f"frameworks/{name}.py defining it, in the package or a catalog directory)")
    _CACHE[name] = fw
    return fw
