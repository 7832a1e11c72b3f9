"""Where a store lives, from a URL or a settings mapping: the local path or the S3 settings, the
retry policy, and the store's credential-free URL. :class:`dlperf_tasks.store.store.Store` builds
its backend from these."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.core import resolved_secrets
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.safeurl import refusal, safe_url
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.store.publish import RetryPolicy
from dlperf_tasks.store.s3backend import S3Backend, s3_settings, settings_from_connection

S3_QUERY_KEYS = {"endpoint", "endpoint_url", "region", "addressing_style", "conditional_writes",
                 "connect_timeout", "read_timeout", "max_attempts"}


def default_store_url() -> str:
    """The configured store (dlperf_tasks.core.settings: ``$DLPERF_STORE_URL``, else the one default)."""
    return Settings.load().store_url


def parse_store_url(url: str) -> tuple[str, dict[str, Any]]:
    """``("local", {"path": ...})`` or ``("s3", settings)`` for a store URL; credentials in it are refused
    (never echoed)."""
    if not url or not isinstance(url, str):
        raise StoreError("store URL is empty")
    problem = refusal(url)
    if problem:  # user info or a credential-like parameter, any scheme: never echoed
        raise StoreError(problem)
    shown = safe_url(url)
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in ("", "file"):
        path = urllib.parse.unquote(parsed.path if parsed.scheme else url)
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            raise StoreError(f"store URL {shown}: file URLs need three slashes (file:///abs/path)")
        if not path:
            raise StoreError(f"store URL {shown} has no path")
        return "local", {"path": path}
    if parsed.scheme != "s3":
        raise StoreError(f"store URL {shown}: unsupported scheme (use s3:// or file://)")
    query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
    unknown = set(query) - S3_QUERY_KEYS
    if unknown:
        raise StoreError(f"store URL {shown}: unknown parameter(s) {sorted(safe_url(k) for k in unknown)}; "
                         f"known: {sorted(S3_QUERY_KEYS)}")
    cfg: dict[str, Any] = {"type": "s3", "bucket": parsed.netloc, "prefix": parsed.path.strip("/")}
    for k, v in query.items():
        cfg["endpoint_url" if k == "endpoint" else k] = v
    return "s3", cfg


def local_url(path: str | Path) -> str:
    return f"file://{Path(path).expanduser().resolve()}"


def settings_dict(settings: Mapping[str, Any] | str | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Store settings as one dict: a URL becomes ``{"url": ...}``, ``None`` the default store;
    ``overrides`` that are not None win."""
    if settings is None:
        settings = default_store_url()
    if isinstance(settings, str):
        cfg: dict[str, Any] = {"url": settings}
    elif isinstance(settings, Mapping):
        cfg = dict(settings)
    else:
        raise StoreError(f"store settings must be a URL or a mapping, got {type(settings).__name__}")
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    return cfg


def retry_from(cfg: dict) -> RetryPolicy | None:
    """Pop ``retries`` / ``retry_base_s`` / ``retry_max_s`` from ``cfg`` into a RetryPolicy (None: none given)."""
    keys = {"retries": "attempts", "retry_base_s": "base_delay", "retry_max_s": "max_delay"}
    kw = {}
    for k, field_name in keys.items():
        if k in cfg:
            v = cfg.pop(k)
            try:
                kw[field_name] = int(v) if field_name == "attempts" else float(v)
            except (TypeError, ValueError):
                raise StoreError(f"store setting {k}: expected a number, got {v!r}") from None
    return RetryPolicy(**kw) if kw else None


def local_path(cfg: dict) -> str:
    """The directory of a local store's settings (what is left of them after the common keys)."""
    path = cfg.pop("path", None) or cfg.pop("root", None)
    if cfg:
        raise StoreError(f"local store settings: unknown key(s) {sorted(cfg)}; known: path, prefix, "
                         f"redaction, inventory, retries, retry_base_s, retry_max_s")
    if not path:
        raise StoreError("local store settings need 'path'")
    return path


def s3_location(cfg: dict, conn: Mapping[str, Any] | None, prefix: str) -> tuple[S3Backend, str, str]:
    """The S3 backend, prefix and URL from settings (and an Airflow AWS connection as a dict); its
    secrets are remembered so the pre-publish leak check refuses them."""
    if conn is not None:
        resolved_secrets.remember_connection(conn)
        from_conn = settings_from_connection(conn)
        prefix = prefix or str(from_conn.pop("prefix", "") or "")
        from_conn.pop("prefix", None)
        cfg = {**from_conn, **{k: v for k, v in cfg.items() if v not in (None, "")}}
    s3 = s3_settings(cfg)
    resolved_secrets.remember(s3.secret_access_key, s3.session_token)
    return S3Backend(s3), prefix, s3_url(s3, prefix)


def s3_url(s3, prefix: str) -> str:
    q = {}
    if s3.endpoint_url:
        q["endpoint"] = s3.endpoint_url
    if s3.region:
        q["region"] = s3.region
    if s3.addressing_style != "auto":
        q["addressing_style"] = s3.addressing_style
    if not s3.conditional_writes:
        q["conditional_writes"] = "false"
    base = f"s3://{s3.bucket}" + (f"/{prefix}" if prefix else "")
    return base + (("?" + urllib.parse.urlencode(q)) if q else "")
