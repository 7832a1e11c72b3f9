"""The S3 backend: any S3-compatible endpoint (AWS S3, Aliyun OSS, MinIO, SeaweedFS...) through
boto3, and its settings (``S3Settings``, from a plain dict or an Airflow AWS connection).
See :mod:`dlperf_tasks.store.backends` for the interface and the credential order.
Credentials are never part of ``repr``, ``describe()`` or any error message.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from dlperf_tasks.core.connection import connection_extra
from dlperf_tasks.core.errors import NotFoundError, StoreError
from dlperf_tasks.store.backends import (CHUNK, AccessRefused, Backend, NotFound,
                                         NotSupported, ObjectInfo, PreconditionFailed, sha256_bytes)
from dlperf_tasks.store.limits import Limits, read_bounded
from dlperf_tasks.core.safeurl import credential_problem

# objects bigger than this go up as S3 multipart uploads (streamed, 16 MiB parts)
MULTIPART_THRESHOLD = 64 * CHUNK
MULTIPART_CHUNK = 16 * CHUNK


# =============================================================================== S3
@dataclass
class S3Settings:
    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    addressing_style: str = "auto"
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    conditional_writes: bool = True
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_attempts: int = 2  # botocore's own retries per call; publish retries on top

    def __post_init__(self):
        if not self.bucket:
            raise StoreError("S3 store: no bucket given")
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise StoreError(f"S3 store: addressing_style must be auto, path or virtual, "
                             f"got {self.addressing_style!r}")
        if self.endpoint_url and _endpoint_has_credentials(self.endpoint_url):
            # the message never repeats the endpoint: it would print the credentials
            raise StoreError("S3 store: the endpoint URL must not contain credentials (user:password@ or a "
                             "key/secret/token parameter); set DLPERF_S3_ACCESS_KEY_ID/DLPERF_S3_SECRET_ACCESS_KEY "
                             "or use an Airflow connection")


def _endpoint_has_credentials(url: str) -> bool:
    """``https://KEY:SECRET@host``, ``https://user@host`` or ``?secret_key=...`` in an endpoint
    (the one rule of :func:`dlperf_tasks.core.safeurl.credential_problem`)."""
    problem = credential_problem(url)
    return problem is not None and "credential" in problem


_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
               "ExpiredToken", "AuthorizationHeaderMalformed", "InvalidSecurity", "403", "Forbidden",
               "AccessForbidden", "TokenRefreshRequired"}
_MISSING_BUCKET = {"NoSuchBucket"}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}


class S3Backend(Backend):
    """Any S3-compatible service through boto3 (AWS S3, Aliyun OSS, MinIO, SeaweedFS...)."""

    def __init__(self, settings: S3Settings):
        self.settings = settings
        self.bucket = settings.bucket
        self.supports_conditional = bool(settings.conditional_writes)
        self._client = None

    def __repr__(self) -> str:
        return f"S3Backend({self.describe()!r})"

    def describe(self, key: str | None = None) -> str:
        ep = self.settings.endpoint_url or "AWS S3"
        return f"endpoint {ep} bucket {self.bucket}" + (f" key {key}" if key else "")

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}" + (f"/{key}" if key else "")

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            s = self.settings
            access, secret, token = s.access_key_id, s.secret_access_key, s.session_token
            if not access:
                access = os.environ.get("DLPERF_S3_ACCESS_KEY_ID") or None
                secret = os.environ.get("DLPERF_S3_SECRET_ACCESS_KEY") or None
                token = os.environ.get("DLPERF_S3_SESSION_TOKEN") or None
            if access and not secret:
                raise StoreError(f"{self.describe()}: an access key id is set but no secret access key "
                                 f"(DLPERF_S3_SECRET_ACCESS_KEY / the connection's password)")
            cfg = Config(
                s3={"addressing_style": s.addressing_style},
                retries={"max_attempts": max(1, int(s.max_attempts)), "mode": "standard"},
                # one socket read waits at most the stall timeout (a dripping body fails in time)
                connect_timeout=s.connect_timeout, read_timeout=min(s.read_timeout, Limits.from_env().stall_s),
                signature_version="s3v4",
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            )
            kwargs: dict[str, Any] = {"config": cfg}
            if s.endpoint_url:
                kwargs["endpoint_url"] = s.endpoint_url
            if s.region:
                kwargs["region_name"] = s.region
            if access:
                kwargs.update(aws_access_key_id=access, aws_secret_access_key=secret, aws_session_token=token)
            try:
                self._client = boto3.session.Session().client("s3", **kwargs)
            except Exception as exc:  # bad endpoint URL, unknown region...
                raise StoreError(f"{self.describe()}: cannot create an S3 client: {exc}") from None
        return self._client

    # ---- error mapping ---------------------------------------------------------------
    def _error(self, exc: Exception, key: str | None, action: str) -> StoreError:
        from botocore import exceptions as bx

        where = self.describe(key)
        if isinstance(exc, bx.ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code") or "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            msg = err.get("Message") or code
            if code == "NotImplemented" or status == 501:
                return NotSupported(f"{where}: {action}: not supported by this endpoint ({code}: {msg})")
            if code in _PRECONDITION or status == 412:
                return PreconditionFailed(f"{where}: {action}: precondition failed (changed concurrently)")
            if code in _MISSING_BUCKET:
                return NotFoundError(f"{where}: bucket {self.bucket!r} does not exist")
            if code in _NOT_FOUND or status == 404:
                return NotFound(f"{where}: no such object")
            if code in _AUTH_CODES or status == 403:
                return AccessRefused(f"{where}: {action} refused ({code}: {msg}); check the credentials "
                                     f"(DLPERF_S3_ACCESS_KEY_ID/DLPERF_S3_SECRET_ACCESS_KEY, AWS_* or the "
                                     f"Airflow connection) and the bucket's permissions")
            return StoreError(f"{where}: {action} failed ({code or status}: {msg})")
        if isinstance(exc, bx.NoCredentialsError):
            return StoreError(f"{where}: no S3 credentials found: set DLPERF_S3_ACCESS_KEY_ID and "
                              f"DLPERF_S3_SECRET_ACCESS_KEY (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                              f"or give an Airflow AWS connection)")
        if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ConnectionClosedError,
                            bx.ReadTimeoutError)):
            return StoreError(f"{where}: {action} failed: endpoint unreachable ({exc})")
        if isinstance(exc, bx.BotoCoreError):
            return StoreError(f"{where}: {action} failed: {exc}")
        if isinstance(exc, OSError):
            return StoreError(f"{where}: {action} failed: {exc}")
        raise exc

    # ---- operations -----------------------------------------------------------------
    def check(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            err = self._error(exc, None, "HEAD bucket")
            if isinstance(err, NotFound):
                raise NotFoundError(f"{self.describe()}: bucket {self.bucket!r} does not exist "
                                    f"(create it first, or check the bucket name/region)") from None
            if isinstance(err, AccessRefused):
                raise StoreError(f"{err} (HEAD bucket needs s3:ListBucket on the bucket)") from None
            raise err from None

    def put_file(self, key, path, sha256, content_type=None):
        extra: dict[str, Any] = {"Metadata": {"sha256": sha256}}
        if content_type:
            extra["ContentType"] = content_type
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                if size <= MULTIPART_THRESHOLD:
                    self.client.put_object(Bucket=self.bucket, Key=key, Body=f, **extra)
                else:  # big logs.tar.gz: multipart, streamed
                    from boto3.s3.transfer import TransferConfig

                    cfg = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD,
                                         multipart_chunksize=MULTIPART_CHUNK, use_threads=False)
                    self.client.upload_fileobj(f, self.bucket, key, ExtraArgs=extra, Config=cfg)
        except Exception as exc:
            raise self._error(exc, key, "PUT") from None

    def put_bytes(self, key, data, sha256=None, content_type=None, if_match=None, if_none_match=False):
        kw: dict[str, Any] = {"Metadata": {"sha256": sha256 or sha256_bytes(data)}}
        if content_type:
            kw["ContentType"] = content_type
        if self.supports_conditional:
            if if_match is not None:
                kw["IfMatch"] = if_match
            elif if_none_match:
                kw["IfNoneMatch"] = "*"
        try:
            resp = self.client.put_object(Bucket=self.bucket, Key=key, Body=data, **kw)
        except Exception as exc:
            raise self._error(exc, key, "PUT") from None
        return resp.get("ETag")

    def head(self, key, with_checksum=True):
        try:
            r = self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            err = self._error(exc, key, "HEAD")
            if isinstance(err, NotFound):
                return None
            raise err from None
        meta = {k.lower(): v for k, v in (r.get("Metadata") or {}).items()}
        return ObjectInfo(key=key, size=int(r.get("ContentLength", 0)), etag=r.get("ETag"),
                          sha256=meta.get("sha256"))

    def get_bytes(self, key, max_bytes=None):
        try:
            r = self.client.get_object(Bucket=self.bucket, Key=key)
            if max_bytes is None:
                return r["Body"].read(), r.get("ETag")
        except Exception as exc:
            raise self._error(exc, key, "GET") from None
        with _BodyReader(r["Body"]) as body:  # bounded, with the stall rule (store/limits.py)
            return read_bounded(body, max_bytes, self.describe(key)), r.get("ETag")

    def open(self, key):
        try:
            r = self.client.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise self._error(exc, key, "GET") from None
        return _BodyReader(r["Body"])

    def delete(self, key):
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise self._error(exc, key, "DELETE") from None

    def list_keys(self, prefix, delimiter=None):
        out: list[str] = []
        kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kw["Delimiter"] = delimiter
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kw):
                out.extend(o["Key"] for o in page.get("Contents", []) or [])
                out.extend(p["Prefix"] for p in page.get("CommonPrefixes", []) or [])
        except Exception as exc:
            raise self._error(exc, prefix, "LIST") from None
        return sorted(out)


class _BodyReader(io.RawIOBase):
    """File-like wrapper around a botocore StreamingBody (readable, closable, context manager)."""

    def __init__(self, body):
        self._body = body
        self._raw = getattr(body, "_raw_stream", None)  # urllib3's response: read1 returns what arrived

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        """At most ``n`` bytes, as soon as some arrived (one socket read): the caller checks
        the deadline and the progress between reads (store/limits.py)."""
        if self._raw is not None and hasattr(self._raw, "read1"):
            return self._raw.read1(n if n and n > 0 else CHUNK)
        return self._body.read(n if n and n > 0 else CHUNK)

    def readinto(self, b) -> int:
        data = self._body.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self._body.close()
        finally:
            super().close()


# =============================================================================== settings
def _as_bool(v: Any, what: str) -> bool:
    if isinstance(v, bool):
        return v
    t = str(v).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise StoreError(f"store setting {what}: expected true/false, got {v!r}")


def settings_from_connection(conn: Mapping[str, Any]) -> dict[str, Any]:
    """An Airflow AWS connection as a plain dict (``login``, ``password``, ``extra`` with
    ``endpoint_url``, ``region_name``, ``addressing_style`` / ``s3: {addressing_style}``,
    optionally ``bucket``/``prefix``) -> store settings keys. No Airflow import."""
    extra = connection_extra(conn, error=StoreError)
    out: dict[str, Any] = {}
    login = conn.get("login") or extra.get("aws_access_key_id")
    password = conn.get("password") or extra.get("aws_secret_access_key")
    if login:
        out["access_key_id"] = login
    if password:
        out["secret_access_key"] = password
    if extra.get("aws_session_token"):
        out["session_token"] = extra["aws_session_token"]
    endpoint = extra.get("endpoint_url") or (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
    if endpoint:
        out["endpoint_url"] = endpoint
    if extra.get("region_name"):
        out["region"] = extra["region_name"]
    style = extra.get("addressing_style") or (extra.get("s3") or {}).get("addressing_style") \
        or ((extra.get("config_kwargs") or {}).get("s3") or {}).get("addressing_style")
    if style:
        out["addressing_style"] = style
    for k in ("bucket", "prefix", "conditional_writes"):
        if k in extra:
            out[k] = extra[k]
    return out


def s3_settings(cfg: Mapping[str, Any]) -> S3Settings:
    known = {"bucket", "endpoint_url", "region", "addressing_style", "access_key_id", "secret_access_key",
             "session_token", "conditional_writes", "connect_timeout", "read_timeout", "max_attempts"}
    unknown = set(cfg) - known - {"type"}
    if unknown:
        raise StoreError(f"S3 store settings: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    kw = {k: v for k, v in cfg.items() if k in known and v not in (None, "")}
    kw.setdefault("bucket", "")
    if "conditional_writes" in kw:
        kw["conditional_writes"] = _as_bool(kw["conditional_writes"], "conditional_writes")
    for k in ("connect_timeout", "read_timeout"):
        if k in kw:
            kw[k] = float(kw[k])
    if "max_attempts" in kw:
        kw["max_attempts"] = int(kw["max_attempts"])
    return S3Settings(**kw)
