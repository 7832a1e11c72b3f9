"""dlperf's settings: one object, read once (:meth:`Settings.load`) and passed down.

Every entry point (``dlperf`` CLI commands, the scheduler's DAG tasks, the results page)
builds one :class:`Settings` and hands it to the engine, the store and the history code;
nothing below reads the environment for these keys again.

Where a value comes from, first match wins:

1. an explicit override (``--store URL`` on the CLI, a test's keyword argument);
2. the environment: ``DLPERF_<KEY>`` (``DLPERF_STORE_URL``, ``DLPERF_CLUSTER``, ``DLPERF_WORK_DIR``,
   ``DLPERF_CATALOG_PATH``, ``DLPERF_NOTIFY_URL``, ``DLPERF_NOTIFY_ON``, ``DLPERF_REDACTION``,
   ``DLPERF_POLICY``, ``DLPERF_TRIAL_RETRIES``, ``DLPERF_LEASE_WAIT_S``, ``DLPERF_TELEMETRY``,
   ``DLPERF_DEFER_TRIALS``, ``DLPERF_TRIAL_POLL_S``, ``DLPERF_PURE_PYTHON`` and the store's read bounds
   ``DLPERF_STORE_DEADLINE_S``, ``_STALL_S``, ``_MIN_BYTES``, ``_MAX_DOC_BYTES``, ``_MAX_INDEX_BYTES``);
3. a ``get(key, default)`` function given by the caller (the scheduler layer maps its own
   configuration section onto it; see the scheduler layer's settings module);
4. the defaults below. The store's ONE default is ``file://<data dir>/store`` and the work
   directory's is ``<data dir>/work``, where the data dir is ``$DLPERF_HOME``, else
   ``<checkout>/.run`` (what ``make run`` uses), so ``make run`` and ``dlperf results ls``
   see the same store without any setting.

This module is the only reader of a ``DLPERF_*`` variable (tests/unit/test_settings_sources.py
holds every other module to it). Code deep down that is not handed a :class:`Settings` asks
:func:`env_value` for one key: the same environment-else-default value, checked the same way.
Secrets are not settings: S3 keys (``DLPERF_S3_*``) are read where the client is built, so
that no settings object, repr or log line ever holds them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from dlperf_tasks.core.errors import DlperfError
from dlperf_tasks.core.safeurl import refusal, safe_url, scheme_problem

NOTIFY_ONS = ("findings", "confirmed")
MiB = 1 << 20
ENV_PREFIX = "DLPERF_"


class SettingsError(DlperfError, ValueError):
    """A setting has a bad value (the message names the key and where it came from; a store URL
    only in its safe form, :func:`dlperf_tasks.core.safeurl.safe_url`)."""


def _int(raw: str, key: str, lo: int) -> int:
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise SettingsError(f"{key}: {raw!r} is not an integer") from None
    if v < lo:
        raise SettingsError(f"{key}: must be >= {lo}")
    return v


def _positive(kind: type) -> Callable[[str, str], float | int]:
    def parse(raw: str, key: str):
        try:
            v = kind(str(raw).strip())
        except ValueError:
            raise SettingsError(f"{key}: {raw!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not v > 0:  # NaN too
            raise SettingsError(f"{key}: {raw!r} must be > 0")
        return v
    return parse


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(raw: str, key: str) -> str:
        v = str(raw).strip().lower()
        if v not in options:
            raise SettingsError(f"{key}: {raw!r} is not one of {', '.join(options)}")
        return v
    return parse


def _flag(raw: str, key: str) -> bool:
    v = str(raw).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{key}: {raw!r} is not a yes/no value (1/0, true/false, yes/no, on/off)")


def _json_object(raw: str, key: str) -> str:
    text = str(raw).strip()
    if not text:
        return ""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{key}: not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(doc, dict):
        raise SettingsError(f"{key}: must be a JSON object, not {type(doc).__name__}")
    return text


def _catalog_path(raw: str, key: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in str(raw).split(os.pathsep) if p.strip())


def _optional(raw: str, key: str) -> str | None:
    return str(raw).strip() or None


#: The keys read the same way everywhere, in ``load`` and in :func:`env_value`: key -> (default as
#: text, parser(raw, where) -> value). The others (store_url, cluster, work_dir, redaction, policy,
#: retries) have their own code in :func:`load_values` (relative paths, the store's source...).
SIMPLE_KEYS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "catalog_path": ("", _catalog_path),
    "notify_url": ("", _optional),
    "notify_on": ("findings", _choice(NOTIFY_ONS)),
    "telemetry": ("", _json_object),
    "defer_trials": ("1", _flag),
    "pure_python": ("0", _flag),
    "trial_poll_s": ("5", _positive(float)),
    "store_deadline_s": ("900", _positive(float)),
    "store_stall_s": ("30", _positive(float)),
    "store_min_bytes": ("1024", _positive(int)),
    "store_max_doc_bytes": (str(64 * MiB), _positive(int)),
    "store_max_index_bytes": (str(1024 * MiB), _positive(int)),
}


def env_name(key: str) -> str:
    """The environment variable of a settings key (``store_stall_s`` -> ``DLPERF_STORE_STALL_S``)."""
    return ENV_PREFIX + key.upper()


def parse_value(key: str, raw: str | None, where: str | None = None):
    """``raw`` checked as the value of ``key`` (one of :data:`SIMPLE_KEYS`; None: its default);
    a bad one raises SettingsError naming ``where`` (default: the key)."""
    default, parse = SIMPLE_KEYS[key]
    return parse(default if raw is None else raw, where or key)


def env_value(key: str, env: Mapping[str, str] | None = None):
    """One key as :meth:`Settings.load` reads it from the environment, else its default: for code
    that is not handed a :class:`Settings` (a library call, a test); entry points pass theirs."""
    env = os.environ if env is None else env
    name = env_name(key)
    raw = env.get(name)
    return parse_value(key, raw or None, f"${name}" if raw else key)


POLICIES = ("continue", "fail_fast")
REDACTIONS = ("ips", "hostnames", "users")
Getter = Callable[[str, "str | None"], "str | None"]


def project_root() -> Path:
    """The checkout (or install) root: the parent of the ``dlperf_tasks`` package."""
    return Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """``$DLPERF_HOME``, else ``<checkout>/.run``: where the default store and work dir live."""
    home = os.environ.get("DLPERF_HOME")
    return Path(home).expanduser() if home else project_root() / ".run"


def default_store_url() -> str:
    """The one default store: ``file://<data dir>/store``."""
    return f"file://{data_dir() / 'store'}"


@dataclass(frozen=True)
class RetryPolicy:
    """How failures are retried: trial retries (retriable statuses only: node unreachable,
    launch failure, timeout, hang), how long a trial waits for nodes other runs hold, and
    what a failed trial does to the run (``continue`` or ``fail_fast``)."""

    trial_retries: int = 1
    lease_wait_s: float = 1800.0
    policy: str = "continue"


@dataclass(frozen=True)
class Settings:
    cluster: str = "local"
    store_url: str = field(default_factory=default_store_url)
    work_dir: str = field(default_factory=lambda: str(data_dir() / "work"))
    catalog_path: tuple[str, ...] = ()
    notify_url: str | None = None
    redaction: tuple[str, ...] = REDACTIONS
    policy: str = "continue"
    trial_retries: int = 1
    lease_wait_s: float = 1800.0
    store_source: str = "default"  # where store_url came from (printed by the CLI)
    notify_on: str = "findings"  # findings: every regression check notifies; confirmed: A/B-confirmed only
    telemetry: str = ""  # JSON object (interval_s, nvidia_smi, policy...; {"enabled": false} = off)
    defer_trials: bool = True  # the scheduler hands a started trial to the triggerer
    pure_python: bool = False  # True: the parsers never use the compiled scanners (frameworks/_native.py)
    trial_poll_s: float = 5.0  # how often the triggerer polls a deferred trial's jobs
    store_deadline_s: float = 900.0  # bounds on what is read back from a store (store/limits.py)
    store_stall_s: float = 30.0
    store_min_bytes: int = 1024
    store_max_doc_bytes: int = 64 * MiB
    store_max_index_bytes: int = 1024 * MiB

    @property
    def is_local(self) -> bool:
        return self.cluster == "local"

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(self.trial_retries, self.lease_wait_s, self.policy)

    @property
    def redaction_spec(self) -> str:
        return ",".join(self.redaction) or "none"

    def with_store(self, url: str | None, source: str = "--store") -> "Settings":
        """A copy whose store is ``url`` (None: unchanged)."""
        if not url:
            return self
        return replace(self, store_url=_store_url(url, source), store_source=source)

    def describe_store(self) -> str:
        """One line for the CLI: which store (never its credentials), and why that one."""
        return f"store: {safe_url(self.store_url)} (from {self.store_source})"

    @classmethod
    def load(cls, get: Getter | None = None, *, env: Mapping[str, str] | None = None, source: str = "settings",
             **overrides) -> "Settings":
        """Read every key once (explicit overrides > environment > ``get`` > defaults)."""
        return cls(**load_values(get, env=env, source=source, **overrides))


def _store_url(url: str, where: str) -> str:
    """A store URL; a plain directory path becomes ``file://<absolute path>``. A URL carrying
    credentials (user info, a credential-like parameter, any scheme) is refused in one line
    that shows it only in its safe form; so is a scheme the store cannot open
    (:data:`dlperf_tasks.core.safeurl.STORE_SCHEMES`, the store's own list)."""
    url = url.strip()
    problem = refusal(url) or scheme_problem(url)
    if problem:
        raise SettingsError(f"{where}: {problem}")
    if "://" not in url and url:
        url = "file://" + os.path.abspath(os.path.expanduser(url))
    return url


def parse_redaction(raw: str, key: str = "redaction") -> tuple[str, ...]:
    raw = (raw or "").strip()
    if raw.lower() == "none":
        return ()
    items = tuple(r.strip() for r in raw.split(",") if r.strip())
    unknown = [r for r in items if r not in REDACTIONS]
    if unknown:
        raise SettingsError(f"{key}: unknown item(s) {unknown}; known: {', '.join(REDACTIONS)}")
    return items


def load_values(get: Getter | None = None, *, env: Mapping[str, str] | None = None, source: str = "settings",
                **overrides) -> dict:
    """The keyword arguments of :class:`Settings` (also used by subclasses that add keys)."""
    env = os.environ if env is None else env

    def pick(key: str, default: str | None) -> tuple[str | None, str]:
        value = overrides.get(key)
        if value is not None:
            if isinstance(value, (list, tuple)):  # catalog_path=("a", "b")
                value = os.pathsep.join(map(str, value))
            return (str(int(value)) if isinstance(value, bool) else str(value)), "argument"
        name = ENV_PREFIX + key.upper()
        if env.get(name):
            return env[name], f"${name}"
        if get is not None:
            got = get(key, None)
            if got not in (None, ""):
                return got, f"{source} {key}"
        return default, "default"

    root = project_root()
    store_url, store_source = pick("store_url", default_store_url())
    cluster, cluster_source = pick("cluster", "local")
    cluster = (cluster or "local").strip()
    if cluster != "local" and not os.path.isabs(cluster):  # the scheduler's relative paths: the checkout's
        cluster = os.path.abspath(cluster) if cluster_source != f"{source} cluster" else str(root / cluster)
    work_dir = (pick("work_dir", str(data_dir() / "work"))[0] or "").strip()
    policy = (pick("policy", "continue")[0] or "continue").strip()
    if policy not in POLICIES:
        raise SettingsError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    simple = {}
    for key in SIMPLE_KEYS:
        raw, where = pick(key, None)
        simple[key] = parse_value(key, raw or None, key if where in ("argument", "default") else where)
    return {
        "cluster": cluster, "store_url": _store_url(store_url or default_store_url(), store_source),
        "store_source": store_source, "work_dir": work_dir, **simple,
        "redaction": parse_redaction(pick("redaction", "ips,hostnames,users")[0] or ""),
        "policy": policy,
        "trial_retries": _int(pick("trial_retries", "1")[0] or "1", "trial_retries", 0),
        "lease_wait_s": float(_int(pick("lease_wait_s", "1800")[0] or "1800", "lease_wait_s", 0)),
    }
