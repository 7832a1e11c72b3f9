"""Where site catalog directories come from: ``extra_dirs`` (``--catalog-dir``), then the
``catalog_path`` setting (``:``-separated ``$DLPERF_CATALOG_PATH``; dlperf_tasks.core.settings). The
catalog (suites) and the framework registry (a site's ``frameworks/<name>.py``) both search these;
each directory must exist."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Sequence

from dlperf_tasks.core.errors import CatalogError
from dlperf_tasks.core.settings import env_name, env_value

ENV_VAR = env_name("catalog_path")


def site_dirs(extra_dirs: list[str | os.PathLike] | None = None,
              catalog_path: Sequence[str] | None = None) -> list[Path]:
    """The site catalog directories, in search order (the built-in catalog not included):
    ``extra_dirs``, then ``catalog_path`` (a Settings' ``catalog_path``; None: the environment's)."""
    extra = list(extra_dirs or [])
    if catalog_path is None:
        catalog_path = env_value("catalog_path")
    if not extra and not catalog_path:
        return []
    dirs: list[Path] = [Path(d) for d in extra]
    dirs += [Path(entry) for entry in catalog_path]
    for d in dirs:
        try:
            ok = d.is_dir()
        except OSError as exc:  # e.g. a name too long for the file system
            ok, why = False, exc.strerror or str(exc)
        else:
            why = "is not a directory"
        if not ok:
            text = str(d)
            # a long path keeps its start and its end (the directory's own name), bounded either way
            shown = repr(text) if len(text) <= 80 else f"{text[:30]!r}...{text[-40:]!r} ({len(text)} characters)"
            raise CatalogError(f"catalog directory {shown} (from {ENV_VAR} or --catalog-dir): {why}")
    return dirs
