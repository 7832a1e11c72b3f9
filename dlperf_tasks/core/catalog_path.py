"""Where site catalog directories come from: ``extra_dirs`` (``--catalog-dir``), then the
``:``-separated ``$DLPERF_CATALOG_PATH``. The catalog (suites) and the framework registry (a
site's ``frameworks/<name>.py``) both search these; each directory must exist."""

from __future__ import annotations

import os
from pathlib import Path

from dlperf_tasks.core.errors import CatalogError

ENV_VAR = "DLPERF_CATALOG_PATH"


def site_dirs(extra_dirs: list[str | os.PathLike] | None = None) -> list[Path]:
    """The site catalog directories, in search order (the built-in catalog not included)."""
    dirs: list[Path] = [Path(d) for d in (extra_dirs or [])]
    for entry in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if entry.strip():
            dirs.append(Path(entry.strip()))
    for d in dirs:
        try:
            ok = d.is_dir()
        except OSError as exc:  # e.g. a name too long for the file system
            ok, why = False, exc.strerror or str(exc)
        else:
            why = "is not a directory"
        if not ok:
            text = str(d)
            shown = repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"
            raise CatalogError(f"catalog directory {shown} (from {ENV_VAR} or --catalog-dir): {why}")
    return dirs
