"""The one seam to the compiled step-line scanners (``_cdll.c``, ``_cmxbert.c``; setup.py builds them).

``dll_scan`` (PyTorch BERT's DLL step lines), ``mxbert_scan`` (gluon-nlp's ``[step N]`` lines),
``literals`` (which of a tuple of literals occur in a text: PyTorch's literals and the crash hints, one
pass), ``lines`` (the lines of a text holding a literal) and ``log_text`` (a log piece's bytes as the text
``LogStream.feed`` reads: tqdm's bar glyphs as ``#``, ``\r\n`` and ``\r`` as ``\n``, one pass) are the
compiled functions, or None: not built (no C compiler), failed to load, or turned off with
``DLPERF_PURE_PYTHON=1``. A parser that gets None reads the same lines in Python, with the same results
(tests/unit/test_cdll_parity.py, test_cmxbert.py, test_log_text_parity.py). :func:`status` says which are in use;
``dlperf --version`` and ``make install`` print it, so a missing build is never silent.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from dlperf_tasks.core.settings import SettingsError, env_name, env_value

#: set to 1 to run the pure-Python parsers without rebuilding or editing anything (a setting)
PURE_ENV = env_name("pure_python")
MODULES = ("_cdll", "_cmxbert")

#: module name -> why it is not in use (absent: in use)
problems: dict[str, str] = {}


def _load(name: str, function: str = "scan") -> Callable | None:
    try:
        if env_value("pure_python"):
            problems[name] = f"{PURE_ENV} is set"
            return None
    except SettingsError as exc:
        problems[name] = str(exc)
        return None
    try:
        return getattr(importlib.import_module(f"dlperf_tasks.frameworks.{name}"), function)
    except (ImportError, AttributeError) as exc:
        problems[name] = f"not built or not loadable ({exc}); run `make build-ext`"
        return None


dll_scan = _load("_cdll")
mxbert_scan = _load("_cmxbert")
literals = _load("_cdll", "which")
log_text = _load("_cdll", "text")
lines = _load("_cdll", "lines")


def status() -> str:
    """One line: the compiled scanners in use, or why each is not (the parsers then run in Python)."""
    if not problems:
        return "compiled scanners: " + ", ".join(MODULES)
    return "compiled scanners: " + "; ".join(
        f"{name} off ({problems[name]})" if name in problems else f"{name} in use" for name in MODULES
    ) + " - the pure-Python parsers give the same results, slower"
