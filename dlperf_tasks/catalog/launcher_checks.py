"""Semantic checks of the launcher fields that change what is measured (called by validate.build_suite).

* ``launcher.bert_config``: a catalog data file (catalog/nodefiles.py) whose dimensions must be the
  suite's ``model`` (a BERT-large config under ``model: bert-base`` is refused at load time).
* ``launcher.optimizer``: ``lamb`` (DeepLearningExamples' FusedLAMB, seed 001) or ``adam`` (the
  FusedAdam source patch DLPerf's own NGC PyTorch BERT report applied); frameworks that do not
  take an optimizer choice refuse the key.
* ``launcher.max_iter``: optimizer steps per trial (DLE ``--max_steps``), an integer >= 1.
* ``gradient_accumulation_steps``: integers >= 1, no duplicates, only where the framework supports it.
"""

from __future__ import annotations

from typing import Any

from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.catalog import nodefiles

OPTIMIZERS = ("lamb", "adam")
#: frameworks whose launch() understands the keys below
ACCUMULATION_FRAMEWORKS = ("pytorch_bert",)
OPTIMIZER_FRAMEWORKS = ("pytorch_bert",)
BERT_CONFIG_FRAMEWORKS = ("pytorch_bert", "tensorflow_bert")


def check_launcher(data: dict[str, Any], filename: str, problems) -> tuple[int, ...]:
    """Add problems for the launcher fields; return the accumulation values (empty when not swept)."""
    fw = data.get("framework", "")
    launcher = data.get("launcher") or {}
    if "bert_config" in launcher:
        path = ("launcher", "bert_config")
        if fw not in BERT_CONFIG_FRAMEWORKS:
            problems.add(path, f"framework {fw!r} does not take a BERT config file "
                               f"(only {', '.join(BERT_CONFIG_FRAMEWORKS)})")
        elif not isinstance(launcher["bert_config"], str):
            problems.add(path, f"must be a catalog data file name, got {launcher['bert_config']!r}")
        else:
            try:
                f = nodefiles.find_data_file(launcher["bert_config"], filename)
                dims = nodefiles.bert_config_dims(f.read_bytes(), str(f))
                nodefiles.check_bert_config(data.get("model", ""), dims, str(f))
            except CatalogError as exc:
                problems.add(path, str(exc))
    if "optimizer" in launcher:
        path = ("launcher", "optimizer")
        if fw not in OPTIMIZER_FRAMEWORKS:
            problems.add(path, f"framework {fw!r} has no optimizer choice (only {', '.join(OPTIMIZER_FRAMEWORKS)})")
        elif launcher["optimizer"] not in OPTIMIZERS:
            problems.add(path, f"unknown optimizer {launcher['optimizer']!r}; known: {', '.join(OPTIMIZERS)}")
    if "max_iter" in launcher:
        v = launcher["max_iter"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.add(("launcher", "max_iter"), f"must be an integer >= 1 (optimizer steps), got {v!r}")
    acc = data.get("gradient_accumulation_steps")
    if acc is None:
        return ()
    if fw not in ACCUMULATION_FRAMEWORKS:
        problems.add(("gradient_accumulation_steps",),
                     f"framework {fw!r} does not take gradient accumulation as a cell parameter "
                     f"(only {', '.join(ACCUMULATION_FRAMEWORKS)})")
    for i, v in enumerate(acc):
        if isinstance(v, str):  # global_batch:<N> (the schema checked its form)
            continue
        if v < 1:
            problems.add(("gradient_accumulation_steps", i), f"{v} must be >= 1")
    if len(set(acc)) != len(acc):
        problems.add(("gradient_accumulation_steps",), f"duplicate values in {acc}")
    for i, rule in enumerate(data.get("exclude") or []):
        if "gradient_accumulation_steps" in rule and rule["gradient_accumulation_steps"] not in acc:
            problems.add(("exclude", i, "gradient_accumulation_steps"),
                         f"{rule['gradient_accumulation_steps']} is not in gradient_accumulation_steps {acc}")
    return tuple(acc)
