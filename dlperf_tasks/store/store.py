"""The :class:`Store`: one object store location (backend + prefix) with the publish and
read API. See :mod:`dlperf_tasks.store` for the overview."""

from __future__ import annotations

import heapq
import json
import os
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping

from dlperf_tasks.core.errors import NotFoundError, StoreError
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.store import layout as L
from dlperf_tasks.store.backends import Backend, LocalBackend, NotFound, sha256_bytes
from dlperf_tasks.store.location import default_store_url  # noqa: F401 - importable from here too
from dlperf_tasks.store.location import (local_path, local_url, parse_store_url, retry_from, s3_location,
                                         settings_dict)
from dlperf_tasks.store.s3backend import S3Backend
from dlperf_tasks.store.index import iter_index, read_index
from dlperf_tasks.store.limits import MAX_DOC_ENV, Limits, check_size
from dlperf_tasks.store.publish import PublishResult, RetryPolicy, publish_run
from dlperf_tasks.store.redact import Redactor
from dlperf_tasks.store.fetch import get_run
from dlperf_tasks.store.index import update_index

DEFAULT_REDACTION = ("ips", "hostnames", "users")
POINTER_MAX = 64 << 10  # a run pointer is ~200 bytes


class Store:
    """A store location. Build with :meth:`from_url`, :meth:`from_settings` or :meth:`default`."""

    def __init__(self, backend: Backend, prefix: str = "", *, redaction: Iterable[str] | str | None = None,
                 inventory: Any = None, retry: RetryPolicy | None = None, url: str | None = None):
        self.backend = backend
        self.layout = L.Layout(prefix)
        self.prefix = self.layout.prefix
        if redaction is None:
            redaction = DEFAULT_REDACTION
        if isinstance(redaction, str):
            redaction = [k.strip() for k in redaction.split(",") if k.strip() and k.strip() != "none"]
        self.redaction = tuple(redaction)
        Redactor(kinds=self.redaction)  # validate kinds now
        self.inventory = inventory
        self.retry = retry or RetryPolicy()
        self._url = url

    def __repr__(self) -> str:
        return f"Store({self.url()!r})"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def default(cls, **kw) -> "Store":
        """The configured store (:meth:`Settings.load`), opened the one way (:func:`open_store`)."""
        return open_store(Settings.load(), **kw)

    @classmethod
    def from_url(cls, url: str, **kw) -> "Store":
        """``file:///abs/dir``, a plain directory path, or
        ``s3://bucket[/prefix]?endpoint=http://host:port&region=r&addressing_style=path``.
        Credentials are never accepted in a URL (environment or Airflow connection only)."""
        kind, cfg = parse_store_url(url)
        if kind == "local":
            return cls(LocalBackend(cfg["path"]), "", url=local_url(cfg["path"]), **kw)
        return cls.from_settings(cfg, **kw)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | str | None = None, **overrides) -> "Store":
        """Build from a URL string or a settings dict:

        ``{"type": "s3"|"local", "url": ..., "path": ..., "bucket", "prefix", "endpoint_url",
        "region", "addressing_style", "conditional_writes", "access_key_id",
        "secret_access_key", "connection": <Airflow AWS connection as a dict>, "redaction":
        "ips,hostnames,users", "inventory": <Cluster | path | dict>, "retries": 4,
        "retry_base_s": 0.5, "retry_max_s": 8}``. ``None`` = :func:`default_store_url`.
        Keyword ``overrides`` win over the dict (e.g. ``redaction=``, ``inventory=``)."""
        cfg = settings_dict(settings, overrides)
        common = {"redaction": cfg.pop("redaction", None), "inventory": cfg.pop("inventory", None),
                  "retry": retry_from(cfg)}
        if isinstance(cfg.get("retry"), RetryPolicy):
            common["retry"] = cfg.pop("retry")
        url = cfg.pop("url", None)
        conn = cfg.pop("connection", None)
        if url:
            extra = {k: v for k, v in cfg.items() if k not in ("type",)}
            if conn is None and not extra:
                return cls.from_url(url, **common)
            store = cls.from_url(url)
            if isinstance(store.backend, S3Backend):
                merged = {**vars(store.backend.settings), "prefix": store.prefix, "type": "s3"}
                merged.update(extra)
                if conn is not None:
                    merged["connection"] = conn
                return cls.from_settings(merged, **{k: v for k, v in common.items()})
            return cls(store.backend, extra.get("prefix", ""), url=store._url, **common)
        kind = str(cfg.pop("type", "") or ("s3" if cfg.get("bucket") or conn else "local"))
        prefix = str(cfg.pop("prefix", "") or "")
        if kind == "local":
            path = local_path(cfg)
            return cls(LocalBackend(path), prefix, url=local_url(path), **common)
        if kind != "s3":
            raise StoreError(f"store type {kind!r} unknown (use 's3' or 'local')")
        backend, prefix, url = s3_location(cfg, conn, prefix)
        return cls(backend, prefix, url=url, **common)

    @classmethod
    def from_connection(cls, conn: Mapping[str, Any], bucket: str | None = None, prefix: str = "",
                                **kw) -> "Store":
        """An Airflow AWS connection (as a dict: login, password, extra{endpoint_url,
        region_name, addressing_style, bucket?}) -> Store. No Airflow import here."""
        cfg: dict[str, Any] = {"type": "s3", "connection": dict(conn), "prefix": prefix}
        if bucket:
            cfg["bucket"] = bucket
        return cls.from_settings(cfg, **kw)

    # ------------------------------------------------------------------ identity
    def url(self, key: str = "") -> str:
        """Where this store (or a key relative to its prefix) lives; never contains credentials."""
        if key:
            return self.backend.url(self.key(key))
        return self._url or self.backend.url(self.prefix)

    def key(self, rel: str) -> str:
        """Full backend key of ``rel`` (a key relative to the prefix)."""
        return "/".join(p for p in (self.prefix, rel) if p)

    def redactor(self, inventory: Any = None) -> Redactor:
        inv = inventory if inventory is not None else self.inventory
        return Redactor.from_inventory(inv, kinds=self.redaction)

    # ------------------------------------------------------------------ publish
    def publish(self, run_dir: str | os.PathLike, *, inventory: Any = None, resume: bool = False,
                retry: RetryPolicy | None = None,
                on_uploaded: Callable[[str, int], None] | None = None,
                on_wait: Callable[[str], None] | None = None, replace: bool = False) -> PublishResult:
        """Publish a run directory (see :mod:`dlperf_tasks.store.publish`). Returns a
        :class:`PublishResult` (``str(result)`` = the run's URL). A different run stored under
        the same run id is refused unless ``replace``."""
        redactor = None if resume else self.redactor(inventory)
        return publish_run(self, run_dir, redactor=redactor, resume=resume, policy=retry or self.retry,
                           on_uploaded=on_uploaded, on_wait=on_wait, replace=replace)

    # ------------------------------------------------------------------ read API
    def suites(self) -> list[str]:
        """Suites that have an index (one small listing of ``<prefix>/index/``)."""
        out = []
        for k in self.backend.list_keys(self.layout.index_prefix(), delimiter="/"):
            s = self.layout.suite_of_index_key(k)
            if s:
                out.append(s)
        return sorted(out)

    def read_index(self, suite: str) -> dict:
        """The raw index document of a suite (``{"schema_version", "suite", "runs": [...]}``)."""
        doc, _ = read_index(self.backend, self.layout.index_key(suite), suite)
        return doc

    def iter_runs(self, suite: str) -> Iterator[dict]:
        """The run summaries of a suite's index one by one, read in bounded pages (an index
        of any length is never held whole; its size is checked first)."""
        return iter_index(self.backend, self.layout.index_key(suite))

    def list_runs(self, suite: str | None = None, since: Any = None, status: str | Iterable[str] | None = None,
                  limit: int | None = None, where: Callable[[dict], bool] | None = None) -> list[dict]:
        """Run summaries from the index (no listing of runs), oldest first.

        ``since``: a date/datetime/ISO string; keeps runs started on or after it.
        ``status``: ``"ok"`` or a list (``ok``/``partial``/``failed``). ``where``: any other
        filter. ``limit``: the last N (then only N summaries are ever held, whatever the
        index's length)."""
        suites = [suite] if suite else self.suites()
        since_s = _iso(since)
        statuses = {status} if isinstance(status, str) else (set(status) if status else None)

        def keep() -> Iterator[dict]:
            for s in suites:
                for r in self.iter_runs(s):
                    when = str(r.get("started_at") or r.get("date") or "")
                    if since_s and _cmp_key(when) < _cmp_key(since_s):
                        continue
                    if statuses and r.get("status") not in statuses:
                        continue
                    if where is not None and not where(r):
                        continue
                    yield r

        if limit is not None:
            if limit <= 0:
                return []
            return sorted(heapq.nlargest(int(limit), keep(), key=_run_order), key=_run_order)
        return sorted(keep(), key=_run_order)

    def locate(self, run_id: str, suite: str | None = None) -> dict:
        """``{run_id, suite, date, path}`` of a run (one read of its pointer object)."""
        L.validate_run_id(run_id)
        try:
            data, _ = self.backend.get_bytes(self.layout.pointer_key(run_id), max_bytes=POINTER_MAX)
            ptr = json.loads(data)
            if suite is None or ptr.get("suite") == suite:
                return ptr
        except NotFound:
            pass
        except ValueError:
            raise StoreError(f"{self.backend.describe(self.layout.pointer_key(run_id))}: not valid JSON") from None
        for s in ([suite] if suite else self.suites()):  # fallback: the indexes
            for r in self.iter_runs(s):
                if r.get("run_id") == run_id:
                    return {"run_id": run_id, "suite": r["suite"], "date": r["date"], "path": r["path"]}
        raise NotFoundError(f"run {run_id!r} not found in {self.url()}" + (f" (suite {suite})" if suite else ""))

    def run_key(self, run_id: str, rel: str, suite: str | None = None) -> str:
        loc = self.locate(run_id, suite)
        return self.layout.key_for_path(loc["path"], rel)

    def read_manifest(self, run_id: str, suite: str | None = None) -> dict:
        """The run's manifest; StoreError if the run is incomplete (no manifest)."""
        key = self.run_key(run_id, L.MANIFEST, suite)
        where = self.backend.describe(key)
        limits = Limits.from_env()
        try:
            info = self.backend.head(key, with_checksum=False)  # its size, before reading it
            if info is None:
                raise NotFound(where)
            check_size(info.size, limits.max_doc_bytes, where, "the manifest", MAX_DOC_ENV)
            data, _ = self.backend.get_bytes(key, max_bytes=limits.max_doc_bytes)
        except NotFound:
            raise NotFoundError(f"run {run_id} is incomplete: {where} does not exist") from None
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise StoreError(f"{where}: manifest is not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise StoreError(f"{where}: manifest is not a JSON object")
        return doc

    def read_object(self, run_id: str, rel: str, suite: str | None = None, verify: bool = True) -> bytes:
        """Bytes of ``rel`` in a run, checked against the manifest's sha256 and size."""
        key = self.run_key(run_id, rel, suite)
        where = self.backend.describe(key)
        bound = Limits.from_env().max_doc_bytes
        if not verify:
            return self.backend.get_bytes(key, max_bytes=bound)[0]
        # the manifest first: its size for the object is checked before the object is read,
        # and the read never goes past it (plus one byte)
        entry = _manifest_entry(self.read_manifest(run_id, suite), rel, where)
        check_size(entry.get("size"), bound, where, rel, MAX_DOC_ENV)
        data, _ = self.backend.get_bytes(key, max_bytes=entry["size"])
        _verify(where, entry, len(data), sha256_bytes(data))
        return data

    def read_result(self, run_id: str, suite: str | None = None) -> dict:
        """The published (redacted) result JSON of a run, checksum-verified."""
        data = self.read_object(run_id, L.RESULT, suite)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise StoreError(f"run {run_id}: result.json is not valid JSON ({exc})") from None
        except RecursionError:
            raise StoreError(f"run {run_id}: result.json is nested too deeply to read") from None

    def read_report(self, run_id: str, suite: str | None = None) -> str:
        return self.read_object(run_id, L.REPORT, suite).decode("utf-8")

    def get_run(self, run_id: str, to_dir: str | os.PathLike, suite: str | None = None) -> Path:
        """Download every object of the manifest into ``to_dir`` (plus manifest.json),
        verifying size and sha256 of each; returns ``to_dir``. A mismatch raises StoreError
        naming the key and both checksums (the bad file is not left behind)."""
        return get_run(self, run_id, to_dir, suite)

    def open_object(self, key: str) -> IO[bytes]:
        """A binary file object for ``key`` relative to the store prefix (e.g. an index
        ``path`` + ``/report.md``). No checksum check: use :meth:`read_object` for that."""
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"invalid key {key!r}")
        return self.backend.open(self.key(key))

    def annotate_run(self, run_id: str, name: str, value: Any, index_value: Any = None,
                     suite: str | None = None) -> str:
        """Attach a JSON document to a published run (``annotations/<name>.json``, e.g. the
        regression report) without touching its manifest or objects, so re-publishing stays
        idempotent. With ``index_value``, also set ``row[name] = index_value`` in the suite
        index row (kept across re-publishes). Returns the annotation's key."""
        loc = self.locate(run_id, suite)
        key = self.layout.key_for_path(loc["path"], L.Layout.annotation_rel(name))
        try:
            data = (json.dumps(value, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()
        except (TypeError, ValueError) as exc:
            raise StoreError(f"annotation {name!r} of run {run_id} is not JSON-serialisable: {exc}") from None
        self.backend.put_bytes(key, data, sha256=sha256_bytes(data), content_type="application/json")
        if index_value is not None:
            row = next((r for r in self.read_index(loc["suite"])["runs"] if r.get("run_id") == run_id), None)
            if row is None:
                raise StoreError(f"run {run_id} is not in the index of suite {loc['suite']}")
            update_index(self.backend, self.layout.index_key(loc["suite"]), dict(row, **{name: index_value}))
        return key

    def read_annotation(self, run_id: str, name: str, suite: str | None = None) -> Any:
        """The document stored by :meth:`annotate_run`; None when there is none."""
        loc = self.locate(run_id, suite)
        try:
            data, _ = self.backend.get_bytes(self.layout.key_for_path(loc["path"], L.Layout.annotation_rel(name)),
                                             max_bytes=Limits.from_env().max_doc_bytes)
        except NotFound:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise StoreError(f"annotation {name!r} of run {run_id} is not valid JSON ({exc})") from None

    def is_complete(self, run_id: str, suite: str | None = None) -> bool:
        try:
            key = self.run_key(run_id, L.MANIFEST, suite)
        except StoreError:
            return False
        return self.backend.head(key, with_checksum=False) is not None


# ---------------------------------------------------------------------------- helpers
def _manifest_entry(manifest: Mapping[str, Any], rel: str, where: str) -> dict:
    for e in manifest.get("objects", []):
        if e.get("path") == rel:
            return e
    raise StoreError(f"{where}: not listed in the run's manifest")


def _verify(where: str, entry: Mapping[str, Any], size: int, digest: str) -> None:
    if digest != entry.get("sha256") or size != entry.get("size"):
        raise StoreError(f"{where}: checksum mismatch: manifest says sha256 {entry.get('sha256')} "
                         f"({entry.get('size')} bytes), store has sha256 {digest} ({size} bytes)")


def _run_order(r: Mapping[str, Any]) -> tuple[str, str]:
    return (str(r.get("started_at") or r.get("date") or ""), str(r.get("run_id")))


def _iso(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _cmp_key(ts: str) -> str:
    """Comparable form of dates/ISO timestamps (dates compare as their midnight)."""
    return ts.replace(" ", "T")


def open_store(settings, **overrides) -> Store:
    """The one way from settings (:class:`dlperf_tasks.core.settings.Settings`) to a Store: the store of
    ``settings.store_url``, redacting as ``settings`` says (raises StoreError); credentials come from the
    environment or connections, never the URL. Keyword ``overrides`` that are not None (``redaction=``
    from ``--redact``, ``inventory=``) win. ``Store.from_url`` / ``Store.from_settings`` stay the
    constructors for a URL or a store mapping."""
    kw = {"redaction": settings.redaction_spec, **{k: v for k, v in overrides.items() if v is not None}}
    return Store.from_settings(settings.store_url, **kw)


def require_store(store: Store) -> Store:
    """``store`` when its location holds a store (anything published or staged there); else a
    one-line StoreError naming the location: a mistyped ``--store`` or ``$DLPERF_STORE_URL`` is an
    error for a reader, not an empty listing. Writers create the store and do not call this."""
    root = getattr(store.backend, "root", None)
    if root is not None and not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise StoreError(f"no store at {store.url()}: {root} {what} (mistyped --store or $DLPERF_STORE_URL?)")
    try:
        keys = store.backend.list_keys(store.prefix, delimiter="/")
    except NotFound:  # an endpoint that cannot list: the read itself names what is missing
        return store
    if not keys:
        raise StoreError(f"no store at {store.url()}: nothing was ever published there (mistyped --store or "
                         f"$DLPERF_STORE_URL? 'make run' publishes into the default store)")
    return store
