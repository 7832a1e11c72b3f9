"""The publish spool: a local copy of exactly what will be uploaded, redacted, with its manifest.

Built under the run directory (``<run_dir>/publish-spool/``) before anything is uploaded::

    publish-spool/objects/logs.tar.gz          redacted, deterministic (same input -> same bytes)
                 /objects/logs/<relpath>        each redacted log
                 /objects/result.json           redacted
                 /objects/report.md             redacted
                 /objects/plots/<name>.png      copied as is
                 /objects/manifest.json         {objects: [{path, size, sha256, content_type}], ...}
                 /target.json                   the store URL (never credentials), suite, date, run path
                 /local-only/redaction-map.json original -> placeholder (NEVER uploaded)
                 /local-only/secrets.json       what publish checks for leaks on --resume
                 /state.json                    {"complete": bool, "uploaded": [...]} (informational)

Building is deterministic (sorted walk, stable placeholder numbering, fixed tar/gzip
timestamps, manifest without wall-clock times), so publishing the same run dir twice yields
byte-identical objects, and ``--resume`` uploads the spool as it is.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import layout as L
from dlperf_tasks.store.backends import sha256_file
from dlperf_tasks.store.leakscan import scan_spool
from dlperf_tasks.store.readback import result_problem
from dlperf_tasks.store.redact import Redactor, Secrets, read_node_identities
from dlperf_tasks.store.runfiles import NotRegular, open_binary, open_text, walk
from dlperf_tasks.store.leakscan import LeakScanner

SPOOL_DIR = "publish-spool"
MANIFEST_SCHEMA_VERSION = 1
_BINARY_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".gz", ".tgz", ".zip", ".pdf")

CONTENT_TYPES = {".json": "application/json", ".md": "text/markdown; charset=utf-8",
                 ".png": "image/png", ".gz": "application/gzip", ".log": "text/plain; charset=utf-8",
                 ".txt": "text/plain; charset=utf-8", ".svg": "image/svg+xml", ".csv": "text/csv"}


def content_type(rel: str) -> str:
    return CONTENT_TYPES.get(os.path.splitext(rel)[1].lower(), "application/octet-stream")


def _is_binary(path: Path) -> bool:
    with open_binary(path) as f:
        return b"\x00" in f.read(8192)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{what}: {path} not found") from None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{what}: cannot read {path}: {exc}") from None


def _write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _publishable_run_id(run_id: str, redactor: Redactor) -> str:
    """A run id is part of every key and of result.json: one that redaction would change or the
    leak check would refuse (``x:y@z`` reads as user@host, ``run-10.1.2.3`` as an address, a
    node's name) cannot be published as it is; refused here in one line, before any work."""
    found = LeakScanner(redactor.known_values()).scan_line(run_id)
    if found or redactor.fresh().redact_text(run_id) != run_id:
        what = f"{found[0][0]} {found[0][1]!r}" if found else "a name or address that redaction removes"
        raise StoreError(f"run id {run_id!r} cannot be published: it contains {what}; {L.RUN_ID_RULE}")
    return run_id


@dataclass
class Spool:
    run_dir: Path
    root: Path
    manifest: dict

    @property
    def objects_dir(self) -> Path:
        return self.root / "objects"

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    @property
    def suite(self) -> str:
        return self.manifest["suite"]

    @property
    def date(self) -> str:
        return self.manifest["date"]

    @property
    def run_path(self) -> str:
        return self.manifest["path"]

    def entries(self) -> list[dict]:
        """Manifest entries in upload order (logs first); the manifest itself is not listed."""
        return sorted(self.manifest["objects"], key=lambda e: L.Layout.upload_rank(e["path"]))

    def file(self, rel: str) -> Path:
        return self.objects_dir / L.validate_relpath(rel)

    def manifest_file(self) -> Path:
        return self.objects_dir / L.MANIFEST

    def manifest_sha256(self) -> str:
        return sha256_file(self.manifest_file())

    # ---- state --------------------------------------------------------------------
    def read_target(self) -> dict:
        p = self.root / "target.json"
        return _read_json(p, "publish spool") if p.exists() else {}

    def write_target(self, target: Mapping[str, Any]) -> None:
        _write_json(self.root / "target.json", dict(target))

    def write_state(self, complete: bool, uploaded: list[str], error: str | None = None) -> None:
        _write_json(self.root / "state.json", {"complete": complete, "uploaded": uploaded, "error": error})

    def state(self) -> dict:
        p = self.root / "state.json"
        return _read_json(p, "publish spool") if p.exists() else {"complete": False, "uploaded": []}

    def secrets(self) -> Secrets:
        p = self.root / "local-only" / "secrets.json"
        if not p.exists():
            return Secrets()
        d = _read_json(p, "publish spool")
        return Secrets(hosts=tuple(d.get("hosts", ())), names=tuple(d.get("names", ())),
                       users=tuple(d.get("users", ())), check_ips=bool(d.get("check_ips", True)),
                       extra=tuple(d.get("extra", ())))

    # ---- integrity ------------------------------------------------------------------
    def verify(self) -> None:
        """Every spooled file matches the manifest (size + sha256)."""
        for e in self.manifest["objects"]:
            p = self.file(e["path"])
            if not p.is_file():
                raise StoreError(f"publish spool {self.root}: {e['path']} is missing; rebuild it with "
                                 f"'dlperf publish {self.run_dir}' (without --resume)")
            if p.stat().st_size != e["size"] or sha256_file(p) != e["sha256"]:
                raise StoreError(f"publish spool {self.root}: {e['path']} does not match the manifest "
                                 f"(changed after spooling); rebuild with 'dlperf publish {self.run_dir}'")

    def check_leaks(self, secrets: Secrets | None = None, planted: list[str] | None = None) -> None:
        """Refuse (StoreError naming object and line) if the independent leak scanner
        (``store/leakscan.py``) finds a known name/address, a planted secret, or anything
        address- or credential-shaped in any spooled object."""
        s = secrets or self.secrets()
        scan_spool(self, known=[*s.hosts, *s.names, *s.users, *s.extra], planted=planted or ())

    # ---- load / build ----------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: str | os.PathLike) -> "Spool":
        run_dir = Path(run_dir)
        root = run_dir / SPOOL_DIR
        mf = root / "objects" / L.MANIFEST
        if not mf.is_file():
            raise StoreError(f"no publish spool in {run_dir} (expected {mf}); run "
                             f"'dlperf publish {run_dir}' first")
        manifest = _read_json(mf, "publish spool")
        for k in ("run_id", "suite", "date", "path", "objects"):
            if k not in manifest:
                raise StoreError(f"publish spool manifest {mf} has no {k!r}")
        return cls(run_dir=run_dir, root=root, manifest=manifest)

    @classmethod
    def build(cls, run_dir: str | os.PathLike, redactor: Redactor, layout: L.Layout,
              target: Mapping[str, Any] | None = None) -> "Spool":
        """(Re)build the spool from the run dir. Needs ``result.json``; takes ``report.md``,
        ``plots/**`` and ``logs/**`` when present."""
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            raise StoreError(f"run directory {run_dir} does not exist")
        # what prepare learnt about every node (node_identity), and this machine's own names
        redactor = redactor.with_identities(read_node_identities(run_dir))
        result_path = run_dir / L.RESULT
        try:  # a link, hard link or special file is refused: its content may come from outside the run
            with open_text(result_path, encoding="utf-8", errors="surrogateescape", newline="") as f:
                result_text = f.read()  # read once: the same text is checked, summarised and redacted
            result = json.loads(result_text)
        except RecursionError:
            raise StoreError(f"{result_path}: nested too deeply to read; refusing to publish") from None
        except FileNotFoundError:
            raise StoreError(f"run directory {run_dir}: {result_path} not found") from None
        except NotRegular as exc:
            raise StoreError(f"{result_path}: {exc.reason}; refusing to publish (result.json must be a regular "
                             f"file of the run directory)") from None
        except (OSError, ValueError) as exc:
            raise StoreError(f"run directory {run_dir}: cannot read {result_path}: {exc}") from None
        run = result.get("run") if isinstance(result, dict) else None
        if not isinstance(run, dict) or not run.get("run_id") or not run.get("suite"):
            raise StoreError(f"{result_path}: 'run.run_id' and 'run.suite' are required to publish")
        problem = result_problem(result)
        if problem:
            raise StoreError(f"{result_path}: {problem}: the store's readers could not read it back; "
                             f"refusing to publish")
        run_id = _publishable_run_id(L.validate_run_id(str(run["run_id"])), redactor)
        suite = L.validate_suite(str(run["suite"]))
        date = L.date_of(run.get("started_at") or run.get("finished_at"))
        run_path = layout.run_path(suite, date, run_id)

        root = run_dir / SPOOL_DIR
        objects = root / "objects"
        for p in (root, objects, root / "local-only"):
            if p.is_symlink():
                raise StoreError(f"{p}: is a symbolic link; refusing to build the publish spool through it")
        if objects.exists():
            shutil.rmtree(objects)
        objects.mkdir(parents=True)
        (root / "local-only").mkdir(exist_ok=True)
        entries: list[dict] = []
        skipped: list[dict] = []

        # logs first (placeholder numbering follows the sorted log tree, then result, report);
        # links, hard links and special files are skipped and named (store/runfiles.py)
        log_files, refused = walk(run_dir, L.LOGS_DIR)
        for item in refused:
            skipped.append({"path": redactor.redact_path(item["path"]), "reason": item["reason"]})
        log_rels: list[str] = []
        for rel_src in log_files:
            p = run_dir / rel_src
            try:
                if redactor.enabled and _is_binary(p):
                    skipped.append({"path": redactor.redact_path(rel_src),
                                    "reason": "binary file: cannot be redacted"})
                    continue
                rel = redactor.redact_path(rel_src)
                L.validate_relpath(rel)
                _redact_file(redactor, p, objects / rel)
            except NotRegular as exc:  # swapped for a link after the walk
                skipped.append({"path": redactor.redact_path(rel_src), "reason": exc.reason})
                continue
            log_rels.append(rel)
        if log_rels:
            _make_tar(objects / L.LOGS_TAR, objects, log_rels)
            entries.append(_entry(objects, L.LOGS_TAR))
            entries.extend(_entry(objects, r) for r in log_rels)

        with open(objects / L.RESULT, "w", encoding="utf-8", errors="surrogateescape", newline="") as dst:
            redactor.redact_stream(io.StringIO(result_text), dst)
        try:
            redacted_result = json.loads((objects / L.RESULT).read_text(encoding="utf-8"))
        except ValueError as exc:  # pragma: no cover - placeholders never break JSON
            raise StoreError(f"{result_path}: redaction produced invalid JSON ({exc})") from None
        entries.append(_entry(objects, L.RESULT))

        report_files, refused = walk(run_dir, L.REPORT)
        skipped.extend(refused)
        if report_files:
            try:
                _redact_file(redactor, run_dir / L.REPORT, objects / L.REPORT)
                entries.append(_entry(objects, L.REPORT))
            except NotRegular as exc:
                skipped.append({"path": L.REPORT, "reason": exc.reason})

        plot_files, refused = walk(run_dir, L.PLOTS_DIR)
        skipped.extend({"path": redactor.redact_path(i["path"]), "reason": i["reason"]} for i in refused)
        for rel_src in plot_files:
            rel = redactor.redact_path(rel_src)
            L.validate_relpath(rel)
            (objects / rel).parent.mkdir(parents=True, exist_ok=True)
            try:
                with open_binary(run_dir / rel_src) as src, open(objects / rel, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except NotRegular as exc:
                (objects / rel).unlink(missing_ok=True)
                skipped.append({"path": rel, "reason": exc.reason})
                continue
            entries.append(_entry(objects, rel))

        manifest = {
            "schema_version": MANIFEST_SCHEMA_VERSION,
            "run_id": run_id, "suite": suite, "date": date, "path": run_path,
            "framework": run.get("framework"), "started_at": run.get("started_at"),
            "finished_at": run.get("finished_at"),
            "objects": sorted(entries, key=lambda e: L.Layout.upload_rank(e["path"])),
            "skipped": skipped,
            "redaction": {"kinds": sorted(redactor.kinds),
                          "placeholders": {k: len(v) for k, v in redactor.mapping().items()}},
            "total_bytes": sum(e["size"] for e in entries),
        }
        _write_json(objects / L.MANIFEST, manifest)
        _write_json(root / "local-only" / "redaction-map.json", redactor.mapping())
        s = redactor.secrets
        _write_json(root / "local-only" / "secrets.json",
                    {"hosts": list(s.hosts), "names": list(s.names), "users": list(s.users),
                     "check_ips": s.check_ips, "extra": list(s.extra)})
        spool = cls(run_dir=run_dir, root=root, manifest=manifest)
        if target is not None:
            spool.write_target(target)
        spool.write_state(False, [])
        # keep the redacted result handy for the index summary
        spool.redacted_result = redacted_result  # type: ignore[attr-defined]
        return spool

    def result(self) -> dict:
        return _read_json(self.file(L.RESULT), "publish spool")


def _entry(objects: Path, rel: str) -> dict:
    p = objects / rel
    return {"path": rel, "size": p.stat().st_size, "sha256": sha256_file(p), "content_type": content_type(rel)}


def _make_tar(dest: Path, base: Path, rels: list[str]) -> None:
    """Deterministic .tar.gz: sorted members, mtime 0, uid/gid 0, no user names, gzip mtime 0."""
    buf_path = dest.with_suffix(".tmp")
    with open(buf_path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for rel in sorted(rels):
                    p = base / rel
                    info = tarfile.TarInfo(rel)
                    info.size = p.stat().st_size
                    info.mtime = 0
                    info.mode = 0o644
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    with open(p, "rb") as f:
                        tar.addfile(info, f)
    os.replace(buf_path, dest)


class _UpTo(io.RawIOBase):
    """The first ``size`` bytes of an open file: a log that keeps growing while publish reads it is
    read up to the size it had when publish reached it (a writer never keeps publish running)."""

    def __init__(self, f, size: int):
        self.f, self.left = f, size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.left <= 0:
            return 0
        n = self.f.readinto(memoryview(buf)[:min(len(buf), self.left)]) or 0
        self.left -= n
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def _redact_file(redactor: Redactor, src_path: Path, dest: Path) -> None:
    """Stream ``src_path`` through the redactor into ``dest`` (bounded memory, any line length),
    up to the size the file had when it was opened."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    raw = open_binary(src_path)
    limited = _UpTo(raw, os.fstat(raw.fileno()).st_size)
    with io.TextIOWrapper(io.BufferedReader(limited), encoding="utf-8", errors="surrogateescape", newline="") as src, \
            open(dest, "w", encoding="utf-8", errors="surrogateescape", newline="") as dst:
        redactor.redact_stream(src, dst)
