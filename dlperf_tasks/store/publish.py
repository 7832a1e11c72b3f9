"""Publishing a run directory: spool (redacted copy + manifest) -> upload -> index.

Order: ``logs.tar.gz`` and ``logs/...`` first, then ``result.json``, ``report.md``,
``plots/*``, and ``manifest.json`` LAST, then the run pointer and the suite index. A run
without a manifest in the store is incomplete, so a publish that fails midway never looks
complete. Each object is retried with bounded exponential backoff, verified after upload
(HEAD: size + sha256 metadata; the local backend re-hashes the file), and skipped when the
store already holds it with the same checksum, so re-publishing is idempotent.

A failure raises :class:`~dlperf_tasks.core.errors.StoreError` naming the endpoint, bucket and
key, and leaves the spool; ``dlperf publish --resume RUN_DIR`` (``publish_run(...,
resume=True)``) uploads that same spool later, producing identical objects.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import layout as L
from dlperf_tasks.store.backends import Backend, PreconditionFailed
from dlperf_tasks.store.index import run_summary, update_index
from dlperf_tasks.store.redact import Redactor
from dlperf_tasks.store.runfiles import publish_lock
from dlperf_tasks.store.replace import drop_old_row, old_location, remove_leftovers
from dlperf_tasks.store.sameid import existing_other_run, refuse_message
from dlperf_tasks.store.spool import Spool
from dlperf_tasks.store.backends import sha256_bytes



class StoreLocation(Protocol):
    """What publishing needs of a store (dlperf_tasks.store.store.Store has it; this module
    does not import that one, which imports this one)."""

    backend: Backend
    layout: L.Layout
    retry: "RetryPolicy"

    def redactor(self, inventory: Any = None) -> Redactor: ...

    def url(self) -> str: ...


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries per object, sleeping ``base_delay * 2**n`` (capped at ``max_delay``,
    jittered) between them."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0

    def __post_init__(self):
        if self.attempts < 1:
            raise StoreError(f"retry attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise StoreError("retry delays must be >= 0")

    def delay(self, attempt: int) -> float:
        return min(self.max_delay, self.base_delay * (2 ** attempt)) * (0.75 + 0.5 * random.random())


@dataclass
class PublishResult:
    run_id: str
    suite: str
    url: str  # where the run lives (s3://bucket/prefix/runs/... or file:///...)
    manifest_key: str
    uploaded: list[str] = field(default_factory=list)  # keys written by this call
    skipped: list[str] = field(default_factory=list)  # keys already present with the same checksum
    spool: str = ""
    # run-dir files not published, each {"path", "reason"}: links, hard links, special files, binary logs
    not_published: list[dict] = field(default_factory=list)
    total_bytes: int = 0
    seconds: float = 0.0
    replaced: str | None = None  # the different run --replace replaced (None: none)
    replaced_left: list[str] = field(default_factory=list)  # what of it could not be removed

    def __str__(self) -> str:
        return self.url


def _with_retry(fn: Callable[[], Any], policy: RetryPolicy, what: str) -> Any:
    last: StoreError | None = None
    for attempt in range(policy.attempts):
        try:
            return fn()
        except PreconditionFailed:
            raise
        except StoreError as exc:
            last = exc
            if attempt + 1 < policy.attempts:
                time.sleep(policy.delay(attempt))
    raise StoreError(f"{last} (gave up after {policy.attempts} attempts)" if policy.attempts > 1 else str(last))


def upload_object(backend: Backend, key: str, path: Path, size: int, sha256: str, content_type: str,
                  policy: RetryPolicy) -> bool:
    """Upload ``path`` to ``key`` unless an identical object is there; verify afterwards.
    Returns True if it wrote, False if skipped."""

    def once() -> bool:
        info = backend.head(key)
        if info is not None and info.size == size and info.sha256 == sha256:
            return False
        backend.put_file(key, path, sha256, content_type)
        after = backend.head(key)
        if after is None:
            raise StoreError(f"{backend.describe(key)}: object missing right after upload")
        if after.size != size or after.sha256 != sha256:
            raise StoreError(f"{backend.describe(key)}: verification failed after upload: size {after.size} "
                             f"(expected {size}), sha256 {after.sha256} (expected {sha256})")
        return True

    return _with_retry(once, policy, key)


def publish_run(store: StoreLocation, run_dir: str | Path, *, redactor: Redactor | None = None,
                resume: bool = False, policy: RetryPolicy | None = None,
                on_uploaded: Callable[[str, int], None] | None = None,
                on_wait: Callable[[str], None] | None = None, replace: bool = False) -> PublishResult:
    """Publish ``run_dir`` to ``store`` (see module docstring).

    ``on_uploaded(key, n)`` is called after the n-th object (1-based) was written or found
    identical; tests use it to take the server down between objects. Publishes of one run
    directory are serialised (store/runfiles.py: publish_lock); ``on_wait(message)`` is told
    when this one waits for another. A different run already stored under the same run id
    (store/sameid.py) is refused, naming both, unless ``replace``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise StoreError(f"run directory {run_dir} does not exist")
    with publish_lock(run_dir, on_wait=on_wait):
        return _publish_locked(store, run_dir, redactor=redactor, resume=resume, policy=policy,
                               on_uploaded=on_uploaded, replace=replace)


#: seconds between two checkpoints of the spool's state file while objects upload (it is rewritten
#: whole: once per object made publish quadratic in the number of files); a resume re-checks the
#: objects uploaded since the last checkpoint (upload_object skips one already stored)
STATE_EVERY_S = 2.0


def _publish_locked(store: StoreLocation, run_dir: Path, *, redactor: Redactor | None, resume: bool,
                    policy: RetryPolicy | None, on_uploaded: Callable[[str, int], None] | None,
                    replace: bool = False) -> PublishResult:
    t0 = time.monotonic()
    policy = policy or store.retry
    run_dir = Path(run_dir)
    layout = store.layout
    if resume:
        spool = Spool.load(run_dir)
        spool.verify()
        if spool.manifest["path"] != layout.run_path(spool.suite, spool.date, spool.run_id):
            raise StoreError(f"publish spool {spool.root}: run path {spool.manifest['path']!r} does not match "
                             f"the layout")
    else:
        spool = Spool.build(run_dir, redactor or store.redactor(), layout, target={"store": store.url()})
    spool.check_leaks()
    if resume and not spool.read_target():
        spool.write_target({"store": store.url()})

    backend = store.backend
    try:
        backend.check()
    except StoreError as exc:
        spool.write_state(False, [], error=str(exc))
        raise StoreError(f"cannot publish run {spool.run_id}: {exc}; the spool is kept at {spool.root}, "
                         f"finish later with 'dlperf publish --resume {run_dir}'") from None
    other = existing_other_run(backend, layout, spool.manifest)
    if other is not None and not replace:
        raise StoreError(refuse_message(store.url(), spool.manifest, other))
    replaced = old_location(backend, layout, spool.run_id) if other is not None else None
    left: list[str] = []

    done: list[str] = list(spool.state().get("uploaded", [])) if resume else []
    done_set = set(done)
    saved_at = time.monotonic()
    uploaded: list[str] = []
    skipped: list[str] = []
    n = 0
    entries = [e for e in spool.entries() if e["path"] != L.MANIFEST]
    entries.append({"path": L.MANIFEST, "size": spool.manifest_file().stat().st_size,
                    "sha256": spool.manifest_sha256(), "content_type": "application/json"})
    try:
        for e in entries:
            key = layout.run_key(spool.suite, spool.date, spool.run_id, e["path"])
            wrote = upload_object(backend, key, spool.file(e["path"]), e["size"], e["sha256"],
                                  e.get("content_type") or "application/octet-stream", policy)
            (uploaded if wrote else skipped).append(key)
            if key not in done_set:
                done.append(key)
                done_set.add(key)
            n += 1
            if time.monotonic() - saved_at >= STATE_EVERY_S:  # a checkpoint, not a rewrite per object
                spool.write_state(False, done)
                saved_at = time.monotonic()
            if on_uploaded:
                on_uploaded(key, n)
        summary = run_summary(spool.result(), spool.run_path, spool.date, manifest_sha256=spool.manifest_sha256())
        pointer = {"run_id": spool.run_id, "suite": spool.suite, "date": spool.date, "path": spool.run_path}
        _with_retry(lambda: _put_json_if_changed(backend, layout.pointer_key(spool.run_id), pointer), policy,
                    "pointer")
        if replaced:  # the replaced run's row goes first: none of its keys (its verdicts) carry over
            left += drop_old_row(backend, layout, replaced, spool.run_id)
        _with_retry(lambda: update_index(backend, layout.index_key(spool.suite), summary), policy, "index")
        if replaced:
            left += remove_leftovers(backend, layout, replaced, spool.manifest)
    except StoreError as exc:
        spool.write_state(False, done, error=str(exc))
        raise StoreError(f"publish of run {spool.run_id} incomplete: {exc}; the spool is kept at {spool.root}, "
                         f"finish with 'dlperf publish --resume {run_dir}'") from None
    spool.write_state(True, done)
    return PublishResult(
        run_id=spool.run_id, suite=spool.suite,
        url=backend.url(layout.run_prefix(spool.suite, spool.date, spool.run_id).rstrip("/")),
        manifest_key=layout.manifest_key(spool.suite, spool.date, spool.run_id),
        uploaded=uploaded, skipped=skipped, spool=str(spool.root),
        not_published=list(spool.manifest.get("skipped") or []),
        total_bytes=sum(e["size"] for e in entries), seconds=time.monotonic() - t0,
        replaced=other, replaced_left=left)


def _put_json_if_changed(backend: Backend, key: str, doc: dict) -> None:
    import json

    data = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    digest = sha256_bytes(data)
    info = backend.head(key)
    if info is not None and info.sha256 == digest and info.size == len(data):
        return
    backend.put_bytes(key, data, sha256=digest, content_type="application/json")

