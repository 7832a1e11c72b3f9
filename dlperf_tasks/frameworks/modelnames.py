"""A comparable name of the model a flag or a log names (``bert-base``, ``resnet50v1b``): the
pre-launch guard and the validity gate compare what a command or a log says it trains with the
cell's model by this one reading."""

from __future__ import annotations

import re
from typing import Any

#: BERT sizes by layer count (Devlin et al.: base 12 x 768, large 24 x 1024; tiny 2 x 128)
_BERT_SIZES = {2: "tiny", 4: "mini", 8: "medium", 12: "base", 24: "large"}
#: (the literal each pattern needs, the pattern)
_BERT_NUMBERS = (("bert_", re.compile(r"bert_(\d+)_(\d+)_(\d+)")), ("l-", re.compile(r"l-(\d+)_h-(\d+)")))
#: a size word on its own (``bert-base-uncased``, ``bert_config_large.json``), in this order of preference
_BERT_SIZE_WORDS = tuple((size, re.compile(rf"(?<![a-z]){size}(?![a-z])"))
                         for size in ("large", "base", "tiny", "mini", "medium"))
_NOT_NAME = re.compile(r"[^a-z0-9]")
_MODEL_NAME = re.compile(r"[a-z]+\d+[a-z0-9]*")


def model_kind(text: Any) -> str | None:
    """A comparable name of the model ``text`` names (``bert-base``, ``resnet50v1b``), or None
    where it names none this module can place."""
    t = str(text or "").strip().strip("'\"").lower()
    if not t:
        return None
    base = t.rsplit("/", 1)[-1]
    for literal, rx in _BERT_NUMBERS:
        m = rx.search(t) if literal in t else None
        if m:
            layers = int(m.group(1))
            return f"bert-{_BERT_SIZES.get(layers, f'{layers}-layers')}"
    if "bert" in t or base.endswith(".json"):
        for size, word in _BERT_SIZE_WORDS:
            if size in base and word.search(base):
                return f"bert-{size}"
        return None
    name = _NOT_NAME.sub("", base)
    return name if _MODEL_NAME.fullmatch(name) else None
