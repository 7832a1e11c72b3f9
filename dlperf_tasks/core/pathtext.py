"""What a few ``pathlib`` calls give, without importing pathlib (~5 ms of ``dlperf extract``'s
start-up, with the ``urllib.parse`` and ``ipaddress`` it pulls in): for code on that command's
path that handles a path as text. Elsewhere use pathlib.

* :func:`path_text` is ``str(Path(path))``;
* :func:`exists` and :func:`is_file` are ``Path(path).exists()`` / ``.is_file()``: False for a
  missing path (or a component that is not a directory, a loop of links, a NUL in the name),
  any other error (no permission...) raised as pathlib raises it.
"""

from __future__ import annotations

import errno
import os
import stat

#: the errors pathlib's exists()/is_file() answer False to
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def path_text(path: str | os.PathLike) -> str:
    """``str(pathlib.Path(path))``: no empty or ``.`` component, no ``/`` at the end, a root of
    exactly two slashes kept (POSIX; elsewhere pathlib itself is asked)."""
    text = os.fspath(path)
    if os.sep != "/" or not isinstance(text, str):
        from pathlib import Path

        return str(Path(path))
    root = "//" if text.startswith("//") and not text.startswith("///") else "/" if text.startswith("/") else ""
    return root + "/".join(p for p in text.split("/") if p not in ("", ".")) or "."


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno in _MISSING:
            return None
        raise
    except ValueError:
        return None


def exists(path: str) -> bool:
    return _stat(path) is not None


def is_file(path: str) -> bool:
    st = _stat(path)
    return st is not None and stat.S_ISREG(st.st_mode)
