"""Where objects physically go: the interface, and a local directory (the S3 backend: store/s3backend.py).

Both backends offer the same small interface (:class:`Backend`): ``put_file``/``put_bytes``
(with ``sha256`` metadata and optional conditional writes), ``head``, ``get_bytes``, ``open``,
``list_keys``, ``check`` (bucket exists, credentials accepted). Every failure becomes a
:class:`~dlperf_tasks.core.errors.StoreError` that names the endpoint, bucket and key.

S3 settings (``S3Settings``): ``endpoint_url`` (empty = AWS), ``region``, ``bucket``,
``prefix``, ``addressing_style`` (``path`` for SeaweedFS/MinIO, ``virtual`` for Aliyun OSS,
``auto`` for AWS), ``conditional_writes`` (If-Match/If-None-Match on PUT; set false for
endpoints that ignore them), ``connect_timeout``/``read_timeout``/``max_attempts``.
Credentials, first found wins:

1. explicit ``access_key_id``/``secret_access_key`` (e.g. from an Airflow AWS connection's
   login/password, converted by :func:`settings_from_connection`);
2. ``DLPERF_S3_ACCESS_KEY_ID`` / ``DLPERF_S3_SECRET_ACCESS_KEY`` (/ ``DLPERF_S3_SESSION_TOKEN``);
3. boto3's own chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ~/.aws, instance role).

Credentials are never part of ``repr``, ``describe()`` or any error message.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.limits import read_bounded

CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PreconditionFailed(StoreError):
    """A conditional write lost a race (the object changed since it was read)."""


class NotFound(StoreError):
    """The key does not exist."""


class AccessRefused(StoreError):
    """The endpoint refused the credentials or the bucket's permissions (403)."""


class NotSupported(StoreError):
    """The endpoint does not implement a feature (e.g. conditional writes)."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str | None = None
    sha256: str | None = None  # from the object's metadata (S3) or computed (local)


class Backend:
    """Interface shared by the S3 and the local backend."""

    supports_conditional = False

    def describe(self, key: str | None = None) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def check(self) -> None:
        """Raise StoreError if the bucket/directory cannot be used (missing, refused, unreachable)."""

    def put_file(self, key: str, path: str | os.PathLike, sha256: str, content_type: str | None = None) -> None:
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes, sha256: str | None = None, content_type: str | None = None,
                  if_match: str | None = None, if_none_match: bool = False) -> str | None:
        """Write ``data``; with ``if_match`` (an etag) or ``if_none_match`` fail with
        PreconditionFailed when someone else wrote in between. Returns the new etag."""
        raise NotImplementedError

    def head(self, key: str, with_checksum: bool = True) -> ObjectInfo | None:
        raise NotImplementedError

    def get_bytes(self, key: str, max_bytes: int | None = None) -> tuple[bytes, str | None]:
        """(content, etag); NotFound if missing. With ``max_bytes``: never reads more than
        that plus one byte (StoreError when the object is bigger; see store/limits.py)."""
        raise NotImplementedError

    def open(self, key: str) -> IO[bytes]:
        raise NotImplementedError

    def list_keys(self, prefix: str, delimiter: str | None = None) -> list[str]:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Remove one object (none there: nothing to do)."""
        raise NotImplementedError

    def url(self, key: str = "") -> str:  # pragma: no cover - interface
        raise NotImplementedError


# =============================================================================== local
class LocalBackend(Backend):
    """Objects as files under ``root`` (the embedded default, ``file:///path``).

    Writes are atomic (temp file + rename); conditional writes are made safe with an
    ``flock`` on ``<root>/.lock`` and etag = sha256 of the content."""

    supports_conditional = True

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()

    def __repr__(self) -> str:
        return f"LocalBackend({str(self.root)!r})"

    def describe(self, key: str | None = None) -> str:
        return f"local store {self.root}" + (f" key {key}" if key else "")

    def url(self, key: str = "") -> str:
        return f"file://{self.root}" + (f"/{key}" if key else "")

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or any(p in ("", ".", "..") for p in key.split("/")) or "\x00" in key:
            raise StoreError(f"{self.describe()}: invalid key {key!r}")
        return self.root / key

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.describe()}: cannot create the store directory: {exc.strerror}") from None
        if not os.access(self.root, os.W_OK):
            raise StoreError(f"{self.describe()}: directory is not writable")

    def _write_atomic(self, dest: Path, src: IO[bytes] | bytes) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(src, bytes):
                    f.write(src)
                else:
                    for block in iter(lambda: src.read(CHUNK), b""):
                        f.write(block)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def put_file(self, key, path, sha256, content_type=None):
        dest = self._path(key)
        try:
            with open(path, "rb") as src:
                self._write_atomic(dest, src)
        except OSError as exc:
            raise StoreError(f"{self.describe(key)}: write failed: {exc}") from None

    def put_bytes(self, key, data, sha256=None, content_type=None, if_match=None, if_none_match=False):
        dest = self._path(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / ".lock", "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if if_match is not None or if_none_match:
                        current = sha256_file(dest) if dest.exists() else None
                        if if_none_match and current is not None:
                            raise PreconditionFailed(f"{self.describe(key)}: object already exists")
                        if if_match is not None and current != if_match:
                            raise PreconditionFailed(f"{self.describe(key)}: object changed since it was read")
                    self._write_atomic(dest, data)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except OSError as exc:
            raise StoreError(f"{self.describe(key)}: write failed: {exc}") from None
        return sha256_bytes(data)

    def head(self, key, with_checksum=True):
        p = self._path(key)
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{self.describe(key)}: {exc.strerror}") from None
        digest = sha256_file(p) if with_checksum else None
        return ObjectInfo(key=key, size=st.st_size, etag=digest, sha256=digest)

    def get_bytes(self, key, max_bytes=None):
        p = self._path(key)
        try:
            if max_bytes is None:
                data = p.read_bytes()
            else:
                with open(p, "rb") as f:
                    data = read_bounded(f, max_bytes, self.describe(key))
        except FileNotFoundError:
            raise NotFound(f"{self.describe(key)}: no such object") from None
        except OSError as exc:
            raise StoreError(f"{self.describe(key)}: read failed: {exc.strerror}") from None
        return data, sha256_bytes(data)

    def open(self, key):
        p = self._path(key)
        try:
            return open(p, "rb")
        except FileNotFoundError:
            raise NotFound(f"{self.describe(key)}: no such object") from None
        except OSError as exc:
            raise StoreError(f"{self.describe(key)}: read failed: {exc.strerror}") from None

    def delete(self, key):
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"{self.describe(key)}: delete failed: {exc.strerror}") from None

    def list_keys(self, prefix, delimiter=None):
        base = self.root
        out = []
        if not base.exists():
            return out
        if delimiter == "/":
            d = base / prefix.rstrip("/") if prefix else base
            if not d.is_dir():
                return out
            for child in sorted(d.iterdir()):
                if child.name.startswith(".tmp-") or child.name == ".lock":
                    continue
                rel = str(child.relative_to(base))
                out.append(rel + "/" if child.is_dir() else rel)
            return out
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith(".tmp-") and p.name != ".lock":
                rel = str(p.relative_to(base))
                if rel.startswith(prefix):
                    out.append(rel)
        return out


def iter_chunks(f: IO[bytes]) -> Iterator[bytes]:
    for block in iter(lambda: f.read(CHUNK), b""):
        yield block
