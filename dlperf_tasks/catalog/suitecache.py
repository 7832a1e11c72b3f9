"""On-disk cache of the built-in suites, already parsed and validated (issue 28.2: start-up).

Reading a suite costs ~24 ms of every ``dlperf extract`` (PyYAML's import alone ~10 ms, the
checks ~6 ms), about a tenth of a whole run on a PyTorch BERT tree. A built-in suite's
:class:`~dlperf_tasks.catalog.model.Suite` is written once (marshal data: catalog/suitecodec.py) into
``$XDG_CACHE_HOME/dlperf/suites`` (default ``~/.cache/dlperf/suites``); the next command that
loads the same file reads it back (~1 ms) and never imports PyYAML or the checks.

The key is a digest of the file's path and bytes and of the package code that builds a Suite
(dlperf's and Python's version, and size and mtime of every module of ``catalog``, ``core``, ``policy`` and
``frameworks``: the checks ask the framework registry), so an
edited suite or a changed loader is a miss, never a stale hit. Only the package's own suites are
cached (a site suite's checks depend on its catalog directory, e.g. its ``frameworks/``). A file
is read only when it and its directory belong to this user (or root) and nobody else may
write them. Any problem (no home, read-only, full disk, a corrupt entry) is a miss: the suite is
read as before. ``DLPERF_NO_SUITE_CACHE=1`` turns the cache off.
"""

from __future__ import annotations

import os
import stat
import sys

from dlperf_tasks import __version__
from dlperf_tasks.core.digest import sha256_hex
from dlperf_tasks.core.pathtext import path_text
from dlperf_tasks.core.envkeys import env_value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

#: the package directory (paths as text: a cache hit imports no pathlib, start-up of dlperf extract)
_PKG = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_CODE_DIRS = ("catalog", "core", "policy", "frameworks")
_code_key: bytes | None = None
#: entries kept: every code change makes new keys, so a put beyond this drops the oldest (a dev checkout)
MAX_ENTRIES = 64


def cache_dir() -> Path | None:
    d = _cache_dir()
    if d is None:
        return None
    from pathlib import Path

    return Path(d)


def _cache_dir() -> str | None:
    """:func:`cache_dir` as ``str(Path)`` writes it."""
    if env_value("no_suite_cache"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return path_text(os.path.join(base, "dlperf", "suites")) if os.path.isabs(base) else None


def _code() -> bytes:
    global _code_key
    if _code_key is None:
        parts = [__version__, sys.version]
        for d in _CODE_DIRS:
            with os.scandir(os.path.join(_PKG, d)) as it:
                parts += sorted(f"{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}"
                                for e in it if e.name.endswith(".py"))
        _code_key = "\n".join(parts).encode()
    return _code_key


def key(path: str, data: bytes) -> str:
    return sha256_hex(b"\0".join((path.encode(), data, _code())))[:40]


def _trusted(st: os.stat_result) -> bool:
    return st.st_uid in (os.getuid(), 0) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def get(path: str, data: bytes):
    """The cached Suite of the file ``path`` holding ``data``, or None."""
    d = _cache_dir()
    if d is None:
        return None
    try:
        fd = os.open(os.path.join(d, f"{key(path, data)}.suite"), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not (_trusted(os.stat(d)) and _trusted(os.fstat(fd))):
            return None
        with os.fdopen(fd, "rb") as f:
            fd = -1
            from dlperf_tasks.catalog.suitecodec import loads

            return loads(f.read())
    except Exception:  # noqa: BLE001 - a corrupt or foreign entry is a miss; the suite is read again
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def put(path: str, data: bytes, suite) -> None:
    """Store ``suite`` (built from ``path`` holding ``data``); silently nothing when it cannot."""
    d = cache_dir()
    if d is None:
        return
    import tempfile

    from dlperf_tasks.catalog.suitecodec import dumps

    try:
        blob = dumps(suite)
    except TypeError:  # a value the cache's format does not hold: this suite is not cached
        return
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, d / f"{key(path, data)}.suite")
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(d)
    except Exception:  # noqa: BLE001 - a cache that cannot be written is only slower
        return


def _prune(d: Path) -> None:
    entries = sorted(d.glob("*.suite"), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[:max(len(entries) - MAX_ENTRIES, 0)]:
        old.unlink(missing_ok=True)
