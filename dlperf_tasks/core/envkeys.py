"""The ``DLPERF_<KEY>`` settings read one key at a time (:func:`env_value`) and their checks, the
part of :mod:`dlperf_tasks.core.settings` a command that is handed no :class:`Settings` needs
(``dlperf extract``: the catalog path, the suite cache switch). Kept apart so that such a command
does not build the Settings dataclasses (~4 ms of its start-up); settings.py re-exports every name
and reads the other keys itself (the two modules are the only readers of ``DLPERF_*`` settings)."""

from __future__ import annotations

import os

from dlperf_tasks.core.errors import DlperfError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Mapping

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
    import json

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
