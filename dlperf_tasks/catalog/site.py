"""Site suites (files outside the built-in ``catalog/suites``): what ``dlperf catalog check``
warns about, and the rule that a site file never hides a built-in suite silently.

* :func:`site_warnings`: a site suite that runs its container privileged, passes host devices
  or adds capabilities gets one warning line each (the built-in suites' own devices and
  ``IPC_LOCK`` are the seeds' and are not repeated); one that replaces a built-in suite says so.
* :func:`builtin_fallback`: the built-in suite a broken site file of the same id would have
  replaced; the catalog keeps running the built-in one and reports the site file instead.
"""

from __future__ import annotations

import os
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent / "suites"


def is_builtin(path: str | os.PathLike) -> bool:
    """``path`` is one of the shipped suite files."""
    try:
        return Path(path).resolve().parent == BUILTIN_DIR
    except OSError:
        return False


def builtin_fallback(path: str | os.PathLike) -> Path | None:
    """The built-in suite file a site file at ``path`` overrides (same id), if any."""
    if is_builtin(path):
        return None
    for suffix in (".yaml", ".yml"):
        candidate = BUILTIN_DIR / f"{Path(path).stem}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def site_warnings(suite) -> list[str]:
    """Warning lines for a site suite (none for a built-in one)."""
    if not suite.source or is_builtin(suite.source):
        return []
    where = f"{suite.source}: suite {suite.id}"
    out = []
    override = builtin_fallback(suite.source)
    if override is not None:
        out.append(f"{where} replaces the built-in suite of the same id ({override.name})")
    c = suite.container
    if c is not None:
        if c.privileged:
            out.append(f"{where} runs its container privileged (--privileged: every device and capability "
                       f"of the node)")
        if c.devices:
            out.append(f"{where} passes host devices into its container: {', '.join(c.devices)}")
        if c.cap_add:
            out.append(f"{where} adds capabilities to its container: {', '.join(c.cap_add)}")
    return out
