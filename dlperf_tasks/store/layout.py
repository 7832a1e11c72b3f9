"""Key names in the object store. This class is the ONE owner of the layout; nothing else
builds keys by hand.

::

    <prefix>/runs/<suite>/<YYYY-MM-DD>/<run_id>/manifest.json      written LAST (run complete)
                                               /result.json
                                               /report.md
                                               /plots/<name>.png
                                               /logs.tar.gz        all logs, redacted
                                               /logs/<relpath>     each log, redacted
                                               /annotations/<name>.json  added later (e.g. regressions)
    <prefix>/index/<suite>.json                 run summaries of a suite (one read for history)
    <prefix>/index/runs/<run_id>.json           pointer {suite, date, path} (find a run by id)
    <prefix>/staging-dag-runs/<hash>.json       PRIVATE: run ids of one scheduled run (a cleared DAG run
                                                planned on another worker reuses them)
    <prefix>/staging/<run_id>/<relpath>         PRIVATE, unredacted: a scheduled run's files passed
                                                between tasks on different workers (plan.json,
                                                node-facts.json, trials/, logs/, outputs); never
                                                listed as a run, never published as is
    <prefix>/state/<name>.json                  PRIVATE: the service's operating state shared by every
                                                worker and the CLI (``state/quarantine.json``: nodes kept
                                                out of trials, ``dlperf cluster clear NODE``); never
                                                listed as a run or an index, never published

``<prefix>`` may be empty. Run ids, suites and relative paths are validated so that no
component can escape its directory (``..``, ``/``, NUL, newlines, backslashes...).
"""

from __future__ import annotations

import datetime as _dt
import re

from dlperf_tasks.core.errors import InvalidRunIdError, StoreError

MANIFEST = "manifest.json"
RESULT = "result.json"
REPORT = "report.md"
LOGS_TAR = "logs.tar.gz"
LOGS_DIR = "logs"
PLOTS_DIR = "plots"
ANNOTATIONS_DIR = "annotations"  # written after publish (e.g. regressions); not in the manifest
STAGING_DIR = "staging"  # private hand-over area between tasks (no shared disk between workers)
STAGING_GROUPS_DIR = "staging-dag-runs"  # private: the run ids of each scheduled run (re-runs reuse them)
STATE_DIR = "state"  # private: the service's operating state (quarantine), shared by all workers

# run ids: Airflow dag_run_ids look like "manual__2026-01-02T03:04:05.123+00:00". The one rule,
# stated once: every message about a run id quotes RUN_ID_RULE (layout checks the characters, the
# spool the names and addresses redaction would change).
RUN_ID_RULE = ("a run id is 1 to 200 letters, digits and . _ : + @ = - starting with a letter or digit, with no "
               "'..', and names no host, address or user@host (redaction would change it)")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+@=-]{0,199}$")
_SUITE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ANNOTATION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_PART_RE = re.compile(r"^[A-Za-z0-9._:+@=,%~-][A-Za-z0-9._:+@=,%~ -]*$")


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a path-safe single component, else raise StoreError."""
    if not isinstance(run_id, str) or not _RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        raise InvalidRunIdError(f"invalid run id {run_id!r}: {RUN_ID_RULE}")
    return run_id


def validate_suite(suite: str) -> str:
    if not isinstance(suite, str) or not _SUITE_RE.fullmatch(suite) or ".." in suite:
        raise StoreError(f"invalid suite name {suite!r}: use letters, digits and . _ - "
                         f"(no '/', '..', spaces or control characters)")
    return suite


def validate_date(date: str) -> str:
    if not isinstance(date, str) or not _DATE_RE.fullmatch(date):
        raise StoreError(f"invalid run date {date!r}: expected YYYY-MM-DD")
    try:
        _dt.date.fromisoformat(date)
    except ValueError:
        raise StoreError(f"invalid run date {date!r}: not a calendar date") from None
    return date


def validate_relpath(rel: str) -> str:
    """A path inside a run (``logs/node1/x.log``): '/'-separated, no empty/'.'/'..' parts."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        raise StoreError(f"invalid object path {rel!r} inside a run")
    for part in rel.split("/"):
        if part in ("", ".", "..") or not _PART_RE.fullmatch(part):
            raise StoreError(f"invalid object path {rel!r} inside a run (bad component {part!r})")
    return rel


def date_of(timestamp: str | None) -> str:
    """``YYYY-MM-DD`` (UTC) of an ISO-8601 timestamp; today (UTC) when missing."""
    if timestamp:
        text = str(timestamp).strip().replace("Z", "+00:00")
        try:
            t = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise StoreError(f"invalid timestamp {timestamp!r}: expected ISO-8601") from None
        if t.tzinfo is not None:
            t = t.astimezone(_dt.timezone.utc)
        return t.date().isoformat()
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


class Layout:
    """Builds every key under one ``prefix`` (``""`` = bucket/directory root)."""

    def __init__(self, prefix: str = ""):
        prefix = (prefix or "").strip("/")
        if prefix:
            validate_relpath(prefix)
        self.prefix = prefix

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    # ---- runs -------------------------------------------------------------------
    def run_path(self, suite: str, date: str, run_id: str) -> str:
        """``runs/<suite>/<date>/<run_id>`` (relative to the prefix; what the index stores)."""
        return f"runs/{validate_suite(suite)}/{validate_date(date)}/{validate_run_id(run_id)}"

    def run_prefix(self, suite: str, date: str, run_id: str) -> str:
        """Full key prefix of a run, ending with ``/``."""
        return self._key(self.run_path(suite, date, run_id)) + "/"

    def run_key(self, suite: str, date: str, run_id: str, rel: str) -> str:
        return self.run_prefix(suite, date, run_id) + validate_relpath(rel)

    def key_for_path(self, run_path: str, rel: str) -> str:
        """Key of ``rel`` inside a run given its index ``path`` (``runs/<suite>/<date>/<id>``)."""
        parts = run_path.split("/")
        if len(parts) != 4 or parts[0] != "runs":
            raise StoreError(f"invalid run path {run_path!r} (expected runs/<suite>/<date>/<run_id>)")
        return self.run_key(parts[1], parts[2], parts[3], rel)

    def manifest_key(self, suite: str, date: str, run_id: str) -> str:
        return self.run_key(suite, date, run_id, MANIFEST)

    @staticmethod
    def annotation_rel(name: str) -> str:
        """``annotations/<name>.json`` inside a run (name: letters, digits, _ and -)."""
        if not isinstance(name, str) or not _ANNOTATION_RE.fullmatch(name):
            raise StoreError(f"invalid annotation name {name!r}: use letters, digits, _ and - (max 64)")
        return f"{ANNOTATIONS_DIR}/{name}.json"

    # ---- index ------------------------------------------------------------------
    def index_prefix(self) -> str:
        return self._key("index") + "/"

    def index_key(self, suite: str) -> str:
        return self._key("index", f"{validate_suite(suite)}.json")

    def pointer_key(self, run_id: str) -> str:
        return self._key("index", "runs", f"{validate_run_id(run_id)}.json")

    def suite_of_index_key(self, key: str) -> str | None:
        """``index/<suite>.json`` -> suite (None for any other key)."""
        base = self.index_prefix()
        if not key.startswith(base) or not key.endswith(".json"):
            return None
        name = key[len(base):-len(".json")]
        if "/" in name or not _SUITE_RE.fullmatch(name):
            return None
        return name

    # ---- staging (private; between the tasks of one scheduled run) -------------------
    def staging_prefix(self, run_id: str) -> str:
        """Full key prefix of a run's staging area, ending with ``/``."""
        return self._key(STAGING_DIR, validate_run_id(run_id)) + "/"

    def staging_key(self, run_id: str, rel: str) -> str:
        return self.staging_prefix(run_id) + validate_relpath(rel)

    def staging_group_key(self, name: str) -> str:
        """``staging-dag-runs/<name>``: the run-id record of one scheduled run (``engine.rundir.group_run_record``)."""
        return self._key(STAGING_GROUPS_DIR, validate_relpath(name))

    def staged_rel(self, run_id: str, key: str) -> str | None:
        """Staging key -> run-relative path (None for a key outside that run's staging area)."""
        base = self.staging_prefix(run_id)
        return key[len(base):] if key.startswith(base) and len(key) > len(base) else None

    # ---- service state (private; shared by every worker and the CLI) -----------------
    def state_key(self, name: str) -> str:
        """``state/<name>.json`` (name: letters, digits, _ and -), e.g. ``state/quarantine.json``."""
        if not isinstance(name, str) or not _ANNOTATION_RE.fullmatch(name):
            raise StoreError(f"invalid state name {name!r}: use letters, digits, _ and - (max 64)")
        return self._key(STATE_DIR, f"{name}.json")

    # ---- run-relative names -------------------------------------------------------
    @staticmethod
    def is_upload_order_last(rel: str) -> bool:
        return rel == MANIFEST

    @staticmethod
    def upload_rank(rel: str) -> tuple[int, str]:
        """Upload order: logs first, then result/report/plots/others, manifest last."""
        if rel == LOGS_TAR or rel.startswith(LOGS_DIR + "/"):
            rank = 0
        elif rel == MANIFEST:
            rank = 9
        elif rel == RESULT:
            rank = 2
        elif rel == REPORT:
            rank = 3
        elif rel.startswith(PLOTS_DIR + "/"):
            rank = 4
        else:
            rank = 5
        return (rank, rel)
