"""Find, read and cache suite YAML files.

Search path: the directories in ``$DLPERF_CATALOG_PATH`` (``:``-separated, searched first, so a
site can add suites or override a built-in one without touching code), then the built-in
``dlperf_tasks/catalog/suites``. A suite ``<id>`` lives in ``<id>.yaml`` (or ``.yml``).

Loading is cached by file modification time, because Airflow's DAG processor calls it on every
parse. The built-in suites are validated once, at install (``dlperf catalog build``, all checks
including the JSON Schema; catalog/builtin.py): a built-in file whose bytes are the ones validated
then is taken from that data; any other file, from ``$DLPERF_CATALOG_PATH``, a path, or a built-in
file edited since, is read as YAML and checked (with the JSON Schema unless it is a built-in file:
the unit tests run it on each of them).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dlperf_tasks.catalog import builtin
from dlperf_tasks.catalog.model import Suite
from dlperf_tasks.core.catalog_path import site_dirs
from dlperf_tasks.core.errors import CatalogError

#: the most bytes a suite file may have: yamlsrc.MAX_BYTES (a unit test checks), here so that a cached
#: load imports no yamlsrc
MAX_BYTES = 256 * 1024

#: the built-in suites' directory (``_BUILTIN``: the same as text)
BUILTIN_DIR = Path(__file__).resolve().parent / "suites"
_BUILTIN = str(BUILTIN_DIR)
_SUFFIXES = (".yaml", ".yml")

_CACHE: dict[str, tuple[int, int, Suite]] = {}


def _builtin_dir() -> Path:
    return Path(_BUILTIN)


def search_dirs(extra_dirs: list[str | os.PathLike] | None = None) -> list[Path]:
    """Directories searched for suites, in order: ``extra_dirs``, ``$DLPERF_CATALOG_PATH``, built-in."""
    return [*site_dirs(extra_dirs), _builtin_dir()]


def load_file(path: str | os.PathLike) -> Suite:
    """Load and validate one suite file (cached by path, mtime and size)."""
    return _load(str(Path(path)))


def _load(name: str) -> Suite:
    """:func:`load_file` of ``name``, a path as ``str(Path(...))`` writes it."""
    try:
        st = os.stat(name)
    except OSError as exc:
        raise CatalogError(f"{name}: cannot read suite file: {exc.strerror}") from None
    key = os.path.realpath(name)
    hit = _CACHE.get(key)
    if hit and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return hit[2]

    if not os.path.isfile(name):
        raise CatalogError(f"{name}: cannot read suite file: not a regular file")
    if st.st_size > MAX_BYTES:  # checked before reading: a huge file is never loaded
        raise CatalogError(f"{name}: file is {st.st_size} bytes; a suite file may have at most {MAX_BYTES}")
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise CatalogError(f"{name}: cannot read suite file: {exc.strerror}") from None
    # the package's own suites are schema-checked by the tests and at install, not on every load
    suite = _parse(name, raw, is_builtin=os.path.dirname(key) == _BUILTIN)
    _CACHE[key] = (st.st_mtime_ns, st.st_size, suite)
    return suite


def _parse(name: str, raw: bytes, is_builtin: bool) -> Suite:
    suite = builtin.validated(name, raw) if is_builtin else None
    return suite if suite is not None else _parse_yaml(name, raw, schema=not is_builtin)


def _parse_yaml(name: str, raw: bytes, schema: bool) -> Suite:
    """Read and check a suite file's YAML (imported here: a built-in suite validated at install needs neither)."""
    from dlperf_tasks.catalog.validate import build_suite
    from dlperf_tasks.catalog.yamlsrc import parse_yaml

    p = Path(name)

    try:
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text() read it
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    data, lines = parse_yaml(text, str(p))
    return build_suite(data, str(p), lines, expected_id=p.stem, schema=schema)


def build_builtin(data_file: str = builtin.DATA_FILE) -> list[str]:
    """Validate every built-in suite file as YAML with every check (the JSON Schema included) and write
    the validated suites to ``data_file`` (what ``dlperf catalog build`` and ``make install`` run);
    returns the files. Raises CatalogError on the first invalid file (nothing is written then)."""
    entries = {}
    for fname in sorted(os.listdir(_BUILTIN)):
        if not fname.endswith(_SUFFIXES) or fname.startswith("."):
            continue
        name = os.path.join(_BUILTIN, fname)
        with open(name, "rb") as fh:
            raw = fh.read()
        entries[fname] = (raw, _parse_yaml(name, raw, schema=True))
    try:
        builtin.write(entries, data_file)
    except (OSError, ValueError) as exc:
        raise CatalogError(f"cannot write the validated built-in suites: {exc}") from None
    return [os.path.join(_BUILTIN, f) for f in entries]


def _looks_like_path(id_or_path: str) -> bool:
    return id_or_path.endswith(_SUFFIXES) or os.sep in id_or_path or "/" in id_or_path


def find_suite_file(suite_id: str, extra_dirs: list[str | os.PathLike] | None = None) -> Path | None:
    for d in search_dirs(extra_dirs):
        for suffix in _SUFFIXES:
            candidate = d / f"{suite_id}{suffix}"
            if candidate.is_file():
                return candidate
    return None


def load_suite(id_or_path: str | os.PathLike, extra_dirs: list[str | os.PathLike] | None = None) -> Suite:
    """Load a suite by id (searched on the catalog path) or by file path."""
    text = str(id_or_path)
    if isinstance(id_or_path, os.PathLike) or _looks_like_path(text):
        return load_file(text)
    if not extra_dirs and not site_dirs():  # only the built-in catalog: found without pathlib
        for suffix in _SUFFIXES:
            candidate = os.path.join(_BUILTIN, f"{text}{suffix}")  # = str(BUILTIN_DIR / name): no "/" in text
            if os.path.isfile(candidate):
                return _load(candidate)
    path = find_suite_file(text, extra_dirs)
    if path is None:
        known = ", ".join(sorted(_suite_files(extra_dirs))) or "none"
        raise CatalogError(
            f"unknown suite {text!r}; known suites: {known} "
            f"(searched: {', '.join(str(d) for d in search_dirs(extra_dirs))})"
        )
    return load_file(path)


def _suite_files(extra_dirs: list[str | os.PathLike] | None = None) -> dict[str, Path]:
    """id -> file, the first directory on the search path winning."""
    found: dict[str, Path] = {}
    for d in search_dirs(extra_dirs):
        for f in sorted(d.iterdir()):
            if f.suffix in _SUFFIXES and f.is_file() and not f.name.startswith("."):
                found.setdefault(f.stem, f)
    return found


def _load_or_fallback(path: Path) -> tuple[Suite | None, CatalogError | None]:
    """``(suite, None)``; for a broken file ``(None, error)``, except a broken SITE file that
    overrides a built-in suite: the built-in suite runs instead, ``(builtin, error)`` (a site file
    never hides a built-in suite, and never silently: the error says what happened)."""
    from dlperf_tasks.catalog.site import builtin_fallback

    try:
        return load_file(path), None
    except CatalogError as exc:
        fallback = builtin_fallback(path)
        if fallback is None:
            return None, exc
        try:
            suite = load_file(fallback)
        except CatalogError:
            return None, exc
        return suite, CatalogError(f"{exc}\n(site file {path} ignored: the built-in suite {suite.id} runs instead)")


def list_suites(extra_dirs: list[str | os.PathLike] | None = None, errors: list[CatalogError] | None = None) -> list[Suite]:
    """Every suite on the search path, sorted by id.

    A broken file raises :class:`CatalogError`, unless ``errors`` is a list: then its error is
    appended there and the other suites are still returned (what DAG parsing wants); a broken
    site file that overrides a built-in suite leaves the built-in one in the list.
    """
    suites = []
    for _, path in sorted(_suite_files(extra_dirs).items()):
        suite, exc = _load_or_fallback(path)
        if exc is not None:
            if errors is None:
                raise exc
            errors.append(exc)
        if suite is not None:
            suites.append(suite)
    return suites


_DAG_LINE = re.compile(r"(?m)^dag:[ \t]*['\"]?([a-z][a-z0-9_]{0,63})['\"]?[ \t]*(?:#.*)?$")


def group_of_broken_file(path: str | os.PathLike) -> str | None:
    """Best-effort DAG group of a suite file that failed to load: its top-level ``dag:`` line
    (read as text, so a syntax error elsewhere does not matter), else the group of the built-in
    suite it overrides; None when neither tells."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(256 * 1024).decode("utf-8", "replace")
        m = _DAG_LINE.search(head)
        if m:
            return m.group(1)
    except OSError:
        pass
    builtin = _builtin_dir() / f"{p.stem}.yaml"
    if builtin.is_file() and builtin.resolve() != p.resolve():
        try:
            return load_file(builtin).dag
        except CatalogError:
            return None
    return None


def dag_names(extra_dirs: list[str | os.PathLike] | None = None) -> list[str]:
    """The DAG groups the catalog's suite files name (their ``dag:`` lines, read as text: cheap,
    and a broken file still names its group), sorted."""
    return sorted({g for g in map(group_of_broken_file, _suite_files(extra_dirs).values()) if g})


def suites_by_group(extra_dirs: list[str | os.PathLike] | None = None
                    ) -> tuple[dict[str, list[Suite]], dict[str | None, list[CatalogError]]]:
    """``({group: [Suite...]}, {group or None: [CatalogError...]})``: the good suites per DAG
    group (a broken site override's built-in suite included) and the broken files per group
    they belong to (None = could not tell). The DAG factory builds every group from its good
    suites and reports the broken files as an import error of their own (dags/dlperf_dags.py
    and the group's module stay loaded: a broken site file hides only itself)."""
    groups: dict[str, list[Suite]] = {}
    broken: dict[str | None, list[CatalogError]] = {}
    for _, path in sorted(_suite_files(extra_dirs).items()):
        suite, exc = _load_or_fallback(path)
        if exc is not None:
            broken.setdefault(group_of_broken_file(path), []).append(exc)
        if suite is not None:
            groups.setdefault(suite.dag, []).append(suite)
    return groups, broken
