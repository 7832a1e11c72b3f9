"""Download a published run into a local directory without trusting the endpoint or the
directory (``dlperf results get``, :meth:`dlperf_tasks.store.Store.get_run`).

- each object is read in bounded pieces, never past its manifest size plus one byte, under
  one overall deadline and the minimum-progress rule (:mod:`dlperf_tasks.store.limits`);
- every directory below the destination is entered with ``O_NOFOLLOW`` (a ``logs`` symlink
  planted there is refused, never followed) and every file is created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh temporary name, then renamed into place: a
  planted ``*.part`` or ``manifest.json`` link is never written through;
- a failure (cut body, checksum mismatch, deadline, stall) removes the temporary file and
  raises one StoreError line; ``manifest.json`` is written last, so a directory without it
  is visibly incomplete.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Callable, Iterator

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.limits import Progress, pieces
from dlperf_tasks.store import layout as L

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def _dir_fd(root: Path, rel_dir: str, create: bool) -> Iterator[int]:
    """An fd of ``root/rel_dir``, each component entered without following a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in [p for p in rel_dir.split("/") if p]:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise StoreError(f"{root / rel_dir}: {part!r} is a symbolic link or not a directory; "
                                     f"refusing to write through it") from None
                raise StoreError(f"{root / rel_dir}: cannot open: {exc.strerror}") from None
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def _refuse_link(dir_fd: int, name: str, shown: Path) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{shown}: exists and is a symbolic link or not a regular file; refusing to replace it")


def write_new(root: Path, rel: str, fill: Callable[[IO[bytes]], None]) -> None:
    """Create ``root/rel`` exclusively: a fresh ``.<name>.<random>.part`` file (O_EXCL,
    O_NOFOLLOW) that ``fill`` writes, renamed over ``rel`` when ``fill`` returns; removed when
    it raises."""
    rel_dir, _, name = rel.rpartition("/")
    with _dir_fd(root, rel_dir, create=True) as dfd:
        _refuse_link(dfd, name, root / rel)
        tmp = f".{name}.{secrets.token_hex(8)}.part"
        fd = os.open(tmp, _NEW_FILE, 0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def download_object(src: IO[bytes], out: IO[bytes], entry: dict, where: str, progress: Progress) -> None:
    """Copy ``src`` to ``out``: at most the manifest size plus one byte, then check size and sha256."""
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise StoreError(f"{where}: the manifest gives no valid size ({size!r})")
    h, got = hashlib.sha256(), 0
    for block in pieces(src, size, where, progress):
        out.write(block)
        h.update(block)
        got += len(block)
    if got != size or h.hexdigest() != entry.get("sha256"):
        cut = f" (body cut: {got} of {size} bytes)" if got < size else ""
        raise StoreError(f"{where}: checksum mismatch{cut}: manifest says sha256 {entry.get('sha256')} "
                         f"({size} bytes), store has sha256 {h.hexdigest()} ({got} bytes); nothing partial is kept")


def get_run(store, run_id: str, to_dir: str | os.PathLike, suite: str | None = None) -> Path:
    """Download every object of the run's manifest into ``to_dir`` (see the module docstring)."""
    progress = Progress()
    manifest = store.read_manifest(run_id, suite)
    loc = store.locate(run_id, suite)
    dest = Path(to_dir)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{dest}: cannot create the destination: {exc.strerror}") from None
    objects = manifest.get("objects")
    if not isinstance(objects, list) or not all(isinstance(e, dict) for e in objects):
        raise StoreError(f"run {run_id}: the manifest has no valid 'objects' list")
    for e in objects:
        rel = L.validate_relpath(e.get("path"))
        if rel == L.MANIFEST:
            continue
        key = store.layout.key_for_path(loc["path"], rel)
        where = store.backend.describe(key)

        def fill(out: IO[bytes], key=key, e=e, where=where) -> None:
            with store.backend.open(key) as src:
                download_object(src, out, e, where, progress)

        try:
            write_new(dest, rel, fill)
        except OSError as exc:
            raise StoreError(f"{dest / rel}: cannot write: {exc.strerror or exc}") from None
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    try:
        write_new(dest, L.MANIFEST, lambda out: out.write(text.encode()))
    except OSError as exc:
        raise StoreError(f"{dest / L.MANIFEST}: cannot write: {exc.strerror or exc}") from None
    return dest
