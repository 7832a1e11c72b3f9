"""Which files of a run directory may leave the machine (publish, staging).

Only regular files with a single link are read. Every symbolic link (a file, a directory such
as ``logs/``, or ``report.md`` / ``result.json`` themselves), every hard link (``st_nlink > 1``:
another name for a file that may live outside the run) and every special file (FIFO, socket,
device) is skipped and named, never followed, so no content from outside the run directory
is uploaded. Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked again on the open
descriptor (a file swapped for a link after the walk is still refused).

:func:`publish_lock` serialises publishes of one run directory (an ``flock`` on
``<run_dir>/.dlperf-publish.lock``): a second ``dlperf publish`` of the same run waits for the
first and says so, instead of rebuilding the spool under it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from pathlib import Path
from typing import Callable, Iterator

from dlperf_tasks.core.errors import StoreError

LOCK_NAME = ".dlperf-publish.lock"
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotRegular(StoreError):
    """A path that is a link, a hard link or a special file (``reason`` says which)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}; skipped (only regular files of the run directory are published)")
        self.path, self.reason = path, reason


def refusal(st: os.stat_result) -> str | None:
    """Why a file with this ``lstat`` may not be read (None: a regular file with one link)."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device file"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if st.st_nlink > 1:
        return f"hard link ({st.st_nlink} names for one file)"
    return None


def open_regular(path: str | os.PathLike, shown: str | None = None) -> int:
    """A read-only fd of ``path`` if it is a regular single-link file (checked on the fd)."""
    shown = shown or str(path)
    try:
        fd = os.open(path, _OPEN)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(shown, "symbolic link") from None
        if exc.errno == errno.ENXIO:  # a socket
            raise NotRegular(shown, "socket") from None
        if exc.errno == errno.ENOENT:
            raise
        raise StoreError(f"{shown}: cannot read: {exc.strerror}") from None
    why = refusal(os.fstat(fd))
    if why is not None:
        os.close(fd)
        raise NotRegular(shown, why)
    os.set_blocking(fd, True)
    return fd


def open_text(path: str | os.PathLike, shown: str | None = None, **kw):
    return open(open_regular(path, shown), "r", **kw)


def open_binary(path: str | os.PathLike, shown: str | None = None):
    return open(open_regular(path, shown), "rb")


def walk(run_dir: Path, top: str) -> tuple[list[str], list[dict]]:
    """(regular files under ``run_dir/top`` as sorted run-relative paths, skipped entries
    ``{"path", "reason"}``). ``top`` may be a file or a directory (``""``: the whole run
    directory); links are never entered."""
    files: list[str] = []
    skipped: list[dict] = []

    def visit(rel: str) -> None:
        here = run_dir / rel if rel else run_dir
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            try:
                names = sorted(os.listdir(here))
            except OSError as exc:
                skipped.append({"path": rel or ".", "reason": f"unreadable directory ({exc.strerror})"})
                return
            for name in names:
                visit(f"{rel}/{name}" if rel else name)
            return
        why = refusal(st)
        if why is None:
            files.append(rel)
        else:
            skipped.append({"path": rel, "reason": why})

    visit(top)
    return sorted(files), skipped


@contextlib.contextmanager
def publish_lock(run_dir: Path, on_wait: Callable[[str], None] | None = None,
                 timeout_s: float = 3600.0) -> Iterator[None]:
    """Hold the publish lock of ``run_dir`` (see the module docstring). ``on_wait(message)``
    is called once when another publish holds it; StoreError after ``timeout_s``."""
    path = run_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise StoreError(f"{path}: cannot open the publish lock: {why}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(f"another publish of {run_dir} is running; waiting for it to finish")
            end = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > end:
                        raise StoreError(f"another publish of {run_dir} held {path} for more than "
                                         f"{timeout_s:g} s; try again when it ends") from None
                    time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock
