"""A log tree on disk or in a tar archive: list its regular files, stream one file's bytes, safely.

Safety: only regular files are read (a FIFO, a device or a symlink to ``/dev/zero``
is listed as not used, never opened for reading; a file is opened with ``O_NONBLOCK`` and
checked with ``fstat`` so one swapped for a FIFO after listing cannot block either); a symlink
is followed only when its target is a regular file inside the tree (never outside: none of an
outside file's content can reach a reason); a file larger than :data:`MAX_LOG_BYTES` is read up
to the cap and the trial is invalid with that reason. Names with control characters are not
used (a directory named ``1n1g\\n`` is not a topology).
"""

from __future__ import annotations

import lzma
import zlib
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from collections.abc import Iterator

from dlperf_tasks.core.errors import ExtractError

#: the largest log read (bytes); beyond it the trial is invalid "file larger than the cap"
MAX_LOG_BYTES = 4 << 30
#: the most lines read for one trial (all its node logs); beyond it the trial is invalid
MAX_TRIAL_LINES = 50_000_000
#: bytes per read
BLOCK = 1 << 20


def archive_errors() -> tuple[type[BaseException], ...]:
    """What a truncated/corrupt .tar(.gz|.bz2|.xz) raises while it is read."""
    return (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)


class FileTooLarge(OSError):
    """A log is larger than :data:`MAX_LOG_BYTES` (the part before the cap was read)."""


def _posix_path(name: str):
    return PurePosixPath(name)


#: the characters a usable file name must not hold (C0 controls and DEL)
_CONTROL_CHARS = frozenset(map(chr, [*range(32), 0x7F]))


def _bad_name(rel: str) -> bool:
    return not _CONTROL_CHARS.isdisjoint(rel)


class LogTree:
    """A directory or a tar archive of logs. ``walk()`` lists usable files (``skipped`` gets the
    others with the reason); ``blocks(rel)`` streams one file's bytes."""

    def __init__(self, root: str | Path, max_bytes: int | None = None):
        self.root = root
        self.max_bytes = max_bytes or MAX_LOG_BYTES
        self.tar: tarfile.TarFile | None = None
        self.members: dict[str, tarfile.TarInfo] = {}
        self.skipped: list[tuple[str, str]] = []
        if os.path.isfile(root):
            try:
                is_tar = tarfile.is_tarfile(root)
                if is_tar:
                    self.tar = tarfile.open(root, "r:*")  # reads headers only; members are streamed on demand
            except archive_errors() as exc:
                raise ExtractError(f"archive {root} is truncated or corrupt: {type(exc).__name__}: {exc}") from None
            if not is_tar:
                raise ExtractError(f"--log-dir {root} is a file but not a tar archive; give a directory of logs "
                                   "or a .tar/.tar.gz of one")
        self._real_root = os.path.realpath(root)

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()

    def walk(self) -> Iterator[str]:
        if self.tar is not None:
            yield from self._walk_tar()
            return
        base = os.path.join(str(self.root), "")
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                rel = os.path.join(dirpath, name)[len(base):].replace(os.sep, "/")
                why = self._unusable(rel)
                if why:
                    if rel.endswith(".log"):
                        self.skipped.append((ascii(rel)[1:-1], why))
                    continue
                yield rel

    def _walk_tar(self) -> Iterator[str]:
        try:
            for m in self.tar or ():  # iterating reads the member headers, not their data
                rel = str(_posix_path(m.name.lstrip("./") or m.name))
                if not m.isfile():
                    if m.name.endswith(".log"):
                        self.skipped.append((ascii(rel)[1:-1], "not a regular file in the archive"))
                    continue
                if _bad_name(rel):
                    self.skipped.append((ascii(rel)[1:-1], "control character in the name"))
                    continue
                self.members[rel] = m
                yield rel
        except archive_errors() as exc:
            raise ExtractError(f"archive {self.root} is truncated or corrupt after {len(self.members)} "
                               f"file(s): {type(exc).__name__}: {exc}") from None

    def _unusable(self, rel: str) -> str:
        """Why the file at ``rel`` must not be read ("" = fine)."""
        if _bad_name(rel):
            return "control character in the name"
        path = os.path.join(str(self.root), rel)
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(path)
                if os.path.commonpath([self._real_root, target]) != self._real_root:
                    return "symlink pointing outside the log tree (not followed)"
                st = os.stat(path)
        except (OSError, ValueError) as exc:
            return f"cannot stat: {type(exc).__name__}"
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file (FIFO, device, socket or directory)"
        return ""

    def blocks(self, rel: str) -> Iterator[bytes]:
        """The file's bytes in blocks, at most ``max_bytes`` (then :class:`FileTooLarge`)."""
        if self.tar is not None:
            fh = self.tar.extractfile(self.members[rel])
            if fh is None:
                return
            what = f"{rel} in archive {self.root}"
            try:
                yield from _capped(fh, self.max_bytes, what)
            except FileTooLarge:
                raise
            except archive_errors() as exc:
                raise OSError(f"{what} is truncated or corrupt ({type(exc).__name__}: {exc})") from None
            return
        yield from read_regular(os.path.join(str(self.root), rel), self.max_bytes)


def read_regular(path: Path | str, max_bytes: int | None = None) -> Iterator[bytes]:
    """Blocks of a regular file; refuses anything else without blocking (O_NONBLOCK + fstat)."""
    max_bytes = max_bytes or MAX_LOG_BYTES
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        name = os.path.basename(str(path))
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{name} is not a regular file")
        yield from _capped(_SizedReader(fd, st.st_size), max_bytes, name)
    finally:
        os.close(fd)


class _SizedReader:
    """``read(BLOCK)`` of a regular file's descriptor, returning what a buffered reader returns
    (BLOCK bytes, fewer only at the end of the file) without allocating a whole BLOCK for a small
    file: it asks for the size ``fstat`` gave (+1 to see the end) and goes on if the file is longer."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.left = size  # bytes fstat says are still to come
        self.at_end = False  # a read already saw the end of the file

    def read(self, n: int) -> bytes:
        if self.at_end:
            return b""
        want = min(n, max(self.left, 0) + 1)
        block = os.read(self.fd, want)
        if 0 < len(block) < want:  # the end of the file, unless a read came short: one byte more says
            more = os.read(self.fd, 1)
            block += more
            if not more:
                self.left -= len(block)
                self.at_end = True
                return block
        while block and len(block) < n:  # longer than fstat said (still written), or a short read
            more = os.read(self.fd, n - len(block))
            if not more:
                break
            block += more
        self.left -= len(block)
        return block


def _capped(fh, max_bytes: int, what: str) -> Iterator[bytes]:
    total = 0
    while True:
        block = fh.read(BLOCK)
        if not block:
            return
        total += len(block)
        if total > max_bytes:
            keep = len(block) - (total - max_bytes)
            if keep > 0:
                yield block[:keep]
            raise FileTooLarge(f"{what} is larger than {max_bytes} bytes (cap on file size); "
                               "only the part before the cap was read")
        yield block
