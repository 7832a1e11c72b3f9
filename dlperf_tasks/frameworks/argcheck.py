"""The whole built argument list against the pinned upstream entry point's argument set.

Part of the pre-launch guard (:mod:`dlperf_tasks.frameworks.preflight`): every option after the
entry point's script in the command must be one the entry point defines at the pinned commit
(``frameworks/entry_flags.json``: data read from upstream, source named), or, where the entry
point's argparse accepts abbreviations, a unique prefix of one (gluon-cv reads ``--mode`` as
``--model``). Then the last value of each flag is what upstream uses (argparse: the last one
wins), so an override appended to a cell's command that names another model (``--model=
resnet101_v1b`` in a ResNet-50 cell, Megatron's layer/hidden/head counts) is refused with the
flag and both values. A flag the entry point does not define would stop it at start
(``error: unrecognized arguments``): refused before launch instead.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Mapping

from dlperf_tasks.core.model import Cell
from dlperf_tasks.frameworks.modelnames import model_kind

#: framework -> {script, source, abbrev, flags} (see the file's "about")
with open(os.path.join(os.path.dirname(__file__), "entry_flags.json"), encoding="utf-8") as _f:
    ENTRY_POINTS = json.load(_f)["entry_points"]
_NUMBER = re.compile(r"-\d")
#: Megatron flag -> the cell layout's attribute
_MEGATRON_MODEL = {"--num-layers": "num_layers", "--hidden-size": "hidden_size", "--num-attention-heads": "num_heads"}


def _resolve(name: str, defined: frozenset, abbrev: bool) -> str | list[str]:
    """The defined flag ``name`` stands for, or the candidates (none or several) when it is none."""
    if name in defined:
        return name
    cands = sorted(f for f in defined if f.startswith(name)) if abbrev and name.startswith("--") else []
    return cands[0] if len(cands) == 1 else cands


def last_values(argv: list[str], script: str, defined: frozenset, abbrev: bool) -> tuple[dict, list[str]]:
    """({defined flag: its last value (True for a bare flag)}, problems) of the options after ``script``."""
    start = next((i + 1 for i, a in enumerate(argv) if posixpath.basename(a) == script), None)
    if start is None:
        return {}, []
    values: dict[str, str | bool] = {}
    problems: list[str] = []
    words = argv[start:]
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("-") or w == "-" or _NUMBER.match(w):
            continue
        name, eq, value = w.partition("=")
        flag = _resolve(name, defined, abbrev)
        if isinstance(flag, list):
            what = f"an ambiguous abbreviation of {', '.join(flag[:4])}" if flag else "a flag it does not define"
            problems.append(f"{name} is {what}")
            continue
        if eq:
            values[flag] = value
        elif i < len(words) and (not words[i].startswith("-") or _NUMBER.match(words[i])):
            values[flag], i = words[i], i + 1
        else:
            values[flag] = True
    return values, problems


def flag_problems(framework: str, cell: Cell, argv: list[str], settings: Mapping | None = None) -> list[str]:
    """What in the command the pinned entry point would refuse or read as another model."""
    ep = ENTRY_POINTS.get(framework)
    script = str((settings or {}).get("script") or (ep or {}).get("script") or "")
    if ep is None or script != ep["script"]:
        return []  # a site's own entry point: its argument set is not known here
    values, unknown = last_values(argv, script, frozenset(ep["flags"]), bool(ep["abbrev"]))
    src = f"(upstream {ep['source'].split(':', 1)[0]})"
    out = [f"{p} {src}: it would stop at start" for p in unknown]
    model = values.get("--model")
    want = model_kind(cell.model)
    if framework == "mxnet_resnet50" and isinstance(model, str) and want and model_kind(model) not in (None, want):
        out.append(f"--model={model} (the last value wins upstream) trains {model}, the cell's model is {cell.model}")
    lay = cell.layout
    if framework == "megatron_gpt" and lay is not None:
        for flag, attr in _MEGATRON_MODEL.items():
            v, need = values.get(flag), getattr(lay, attr, 0)
            if isinstance(v, str) and need and v != str(need):
                out.append(f"{flag} {v} (the last value wins upstream) replaces the cell's {attr} {need} ({lay.case})")
    return out
