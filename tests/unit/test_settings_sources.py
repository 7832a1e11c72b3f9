"""One way to each setting: only dlperf_tasks/core/settings.py reads a ``DLPERF_*``
variable; the store opens exactly the schemes the settings accept; only store/store.py's open_store turns
settings into a Store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dlperf_tasks.core import settings as S
from dlperf_tasks.core.catalog_path import site_dirs
from dlperf_tasks.core.errors import CatalogError, StoreError
from dlperf_tasks.core.safeurl import STORE_SCHEMES
from dlperf_tasks.core.settings import Settings, SettingsError, env_value
from dlperf_tasks.store.limits import Limits
from dlperf_tasks.store.store import open_store
from dlperf_tasks.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "dlperf_tasks"

#: Modules that may read a DLPERF_ variable, and why (keep this list short).
ALLOWED_READERS = {
    "dlperf_tasks/core/settings.py": "the one reader of every setting",
    # S3 keys are secrets, not settings: read where the client is built, so that no Settings
    # object, repr or log line ever holds them.
    "dlperf_tasks/store/s3backend.py": "DLPERF_S3_ACCESS_KEY_ID / _SECRET_ACCESS_KEY / _SESSION_TOKEN",
    # runs inside the training job on a node (a sitecustomize hook), not in dlperf's processes
    "dlperf_tasks/catalog/data/dlperf_patch.py": "sets DLPERF_PATCHES_APPLIED for the job",
}
SKIPPED_DIRS = ("dlperf_tasks/smoke/",)  # the stand-in trainer: a program of its own, run on nodes
ENV_WORDS = ("environ", "environb", "getenv")


def _module_constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _literal(node.value, {})
            if value is not None:
                out[node.targets[0].id] = value
    return out


def _literal(node: ast.AST, names: dict[str, str]) -> str | None:
    """The string ``node`` stands for: a literal, a module constant, ``env_name("key")``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        return names.get(node.attr)  # mod.ENV: matched by name among every module's constants
    if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "env_name"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return S.env_name(str(node.args[0].value))
    return None


def _mentions_env(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ENV_WORDS or isinstance(n, ast.Name) and (
        n.id in ENV_WORDS or "env" in n.id.lower()) for n in ast.walk(node))


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def dlperf_env_reads(source: str, shared: dict[str, str] | None = None) -> list[str]:
    """Where ``source`` reads a DLPERF_ environment variable: a ``.get``/``getenv``/``[...]`` of an
    environment-like object with a DLPERF_ name (literal, constant, env_name), or a module that
    touches ``os.environ`` and carries a DLPERF_ string outside its docstrings (a loop over names)."""
    tree = ast.parse(source)
    names = {**(shared or {}), **_module_constants(tree)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            reader = (isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault", "getenv")
                      and (func.attr == "getenv" or _mentions_env(func.value))) or getattr(func, "id", "") == "getenv"
            key = _literal(node.args[0], names)
            if reader and key and key.startswith(S.ENV_PREFIX):
                hits.append(f"line {node.lineno}: reads {key}")
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _mentions_env(node.value):
            key = _literal(node.slice, names)
            if key and key.startswith(S.ENV_PREFIX):
                hits.append(f"line {node.lineno}: reads {key}")
    skip = _docstrings(tree)
    touches = any(isinstance(n, ast.Attribute) and n.attr in ENV_WORDS or isinstance(n, ast.Name) and n.id in ENV_WORDS
                  for n in ast.walk(tree))
    literals = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and n.value.startswith(S.ENV_PREFIX) and id(n) not in skip]
    if touches and literals and not hits:
        hits.append(f"line {literals[0].lineno}: touches the environment and names {literals[0].value}")
    return hits


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if not rel.startswith(SKIPPED_DIRS):
            yield rel, p.read_text()


def test_no_module_but_settings_reads_a_dlperf_variable():
    sources = dict(_modules())
    shared: dict[str, str] = {}
    for text in sources.values():
        shared.update({k: v for k, v in _module_constants(ast.parse(text)).items() if v.startswith(S.ENV_PREFIX)})
    found = {rel: hits for rel, text in sources.items() if rel not in ALLOWED_READERS
             for hits in [dlperf_env_reads(text, shared)] if hits}
    assert found == {}, "read it through dlperf_tasks.core.settings (Settings / env_value)"
    assert all(dlperf_env_reads(sources[rel], shared) for rel in ALLOWED_READERS), "a stale allowlist entry"


@pytest.mark.parametrize("source", [
    'import os\nX = os.environ.get("DLPERF_X", "")',
    'import os\nX = os.getenv("DLPERF_X")',
    'from os import environ\nX = environ["DLPERF_X"]',
    'import os\nENV = "DLPERF_X"\ndef f(env=None):\n    return (env or os.environ).get(ENV)',
    'import os\nfrom m import notify as messages\ndef f():\n    return os.environ.get(messages.ENV)',
    'import os\nNAMES = {"a": "DLPERF_A"}\ndef f():\n    return [os.environ.get(v) for v in NAMES.values()]',
    'def f(env):\n    return env.get(env_name("telemetry"))',
])
def test_the_checker_finds_each_way_of_reading(source):
    assert dlperf_env_reads(source, {"ENV": "DLPERF_NOTIFY_URL"})


def test_the_checker_lets_other_reads_and_writes_pass():
    assert not dlperf_env_reads('"""Mentions DLPERF_X."""\nimport os\nHOME = os.environ.get("HOME")')
    assert not dlperf_env_reads('def f(env):\n    env["DLPERF_OUT"] = "/logs"\n    return env')


# ------------------------------------------------------------------ the settings read at call time
def test_deep_code_sees_what_settings_reads(monkeypatch, tmp_path):
    monkeypatch.setenv("DLPERF_STORE_STALL_S", "2.5")
    monkeypatch.setenv("DLPERF_CATALOG_PATH", str(tmp_path))
    assert Limits.from_env().stall_s == 2.5 == Settings.load().store_stall_s
    assert Limits.from_settings(Settings.load(store_max_doc_bytes=10)).max_doc_bytes == 10
    assert site_dirs() == [tmp_path] and site_dirs(catalog_path=()) == []  # passed settings win
    monkeypatch.setenv("DLPERF_STORE_STALL_S", "soon")
    with pytest.raises(StoreError, match=r"^\$DLPERF_STORE_STALL_S: 'soon' is not a number$"):
        Limits.from_env()
    with pytest.raises(CatalogError, match="DLPERF_CATALOG_PATH"):
        site_dirs(catalog_path=[str(tmp_path / "missing")])


@pytest.mark.parametrize("key,raw,message", [
    ("notify_on", "always", "is not one of findings, confirmed"),
    ("telemetry", "{interval", "not valid JSON"),
    ("telemetry", "[1]", "must be a JSON object"),
    ("defer_trials", "maybe", "is not a yes/no value"),
    ("trial_poll_s", "0", "must be > 0"),
    ("store_max_index_bytes", "1.5", "is not an integer"),
    ("store_deadline_s", "nan", "must be > 0"),
])
def test_new_keys_are_checked_in_one_line_naming_the_variable(key, raw, message):
    env = {S.env_name(key): raw}
    for load in (lambda: Settings.load(env=env), lambda: env_value(key, env)):
        with pytest.raises(SettingsError) as exc:
            load()
        assert str(exc.value).startswith(f"${S.env_name(key)}: ") and message in str(exc.value)
        assert "\n" not in str(exc.value)


def test_new_keys_come_from_env_then_scheduler_config_then_default():
    cfg = {"defer_trials": "no", "trial_poll_s": "2", "notify_on": "confirmed"}
    s = Settings.load(lambda k, d: cfg.get(k, d), env={"DLPERF_TRIAL_POLL_S": "7"}, source="[dlperf]")
    assert (s.defer_trials, s.trial_poll_s, s.notify_on, s.store_min_bytes) == (False, 7.0, "confirmed", 1024)
    assert Settings.load(env={}) == Settings(store_url=Settings.load(env={}).store_url)  # defaults agree


# ------------------------------------------------------------------ one list of store schemes
def _url(scheme: str, tmp_path: Path) -> str:
    return {"file": f"file://{tmp_path / 'store'}", "s3": "s3://bucket/p?endpoint=http://127.0.0.1:9&region=r"}[scheme]


@pytest.mark.parametrize("scheme", STORE_SCHEMES)
def test_every_scheme_settings_accepts_the_store_opens(scheme, tmp_path):
    s = Settings.load(env={}, store_url=_url(scheme, tmp_path))
    store = open_store(s)  # opening builds no connection: nothing is contacted
    assert store.url().startswith(f"{scheme}://")


@pytest.mark.parametrize("url", ["oss://bucket/p", "ftp://x/y", "gs://b", "S4://b"])
def test_other_schemes_are_refused_by_both_with_the_same_message(url):
    with pytest.raises(SettingsError) as by_settings:
        Settings.load(env={}, store_url=url)
    with pytest.raises(StoreError) as by_store:
        Store.from_url(url)
    assert str(by_settings.value) == f"argument: {by_store.value}"
    assert "unsupported scheme" in str(by_store.value) and "s3://...?endpoint=" in str(by_store.value)


def test_a_plain_directory_is_a_file_store_for_both(tmp_path):
    assert Settings.load(env={}, store_url=str(tmp_path)).store_url == f"file://{tmp_path}"
    assert Store.from_url(str(tmp_path)).url() == f"file://{tmp_path}"


# ------------------------------------------------------------------ one opener
CONSTRUCTORS = ("from_url", "from_settings", "default", "from_connection")


def _store_constructions(text: str, only_from_settings: bool = False) -> list[int]:
    """Lines that build a Store (``Store(...)``, ``Store.from_url(...)``...); ``only_from_settings``:
    those whose arguments read a settings object's ``store_url`` / ``redaction_spec``."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in CONSTRUCTORS and getattr(f.value, "id", "") in ("Store", "cls")
                    or getattr(f, "id", "") == "Store"):
                args = [*node.args, *(k.value for k in node.keywords)]
                if not only_from_settings or any(isinstance(n, ast.Attribute) and n.attr in ("store_url", "redaction_spec")
                                                 for a in args for n in ast.walk(a)):
                    out.append(node.lineno)
    return out


def test_only_the_opener_turns_settings_into_a_store():
    outside = {rel: lines for rel, text in _modules() if not rel.startswith("dlperf_tasks/store/")
               for lines in [_store_constructions(text)] if lines}
    for rel in ("plugins/dlperf_results.py", *(p.relative_to(ROOT).as_posix() for p in (ROOT / "dags").rglob("*.py"))):
        lines = _store_constructions((ROOT / rel).read_text())
        if lines:
            outside[rel] = lines
    assert outside == {}, "open the configured store with dlperf_tasks.store.store.open_store(settings)"
    inside = {rel: lines for rel, text in _modules() if rel.startswith("dlperf_tasks/store/")
              for lines in [_store_constructions(text, only_from_settings=True)] if lines}
    assert list(inside) == ["dlperf_tasks/store/store.py"]
    assert _store_constructions("q = Quarantine(Store.from_settings(settings.store_url))", True) == [1]


def test_the_opener_applies_the_settings_redaction(tmp_path):
    s = Settings.load(env={"DLPERF_REDACTION": "ips"}, store_url=str(tmp_path))
    assert open_store(s).redaction == ("ips",)
    assert open_store(s, redaction="none").redaction == ()
    from dlperf_tasks.history.source import store_for as history_open
    from dlperf_tasks.store.quarantine import Quarantine

    assert history_open(settings=s).redaction == ("ips",)
    Quarantine.for_settings(s).add("node-1", ["xid 79"])
    assert "node-1" in Quarantine(open_store(s)).nodes() and (tmp_path / "state" / "quarantine.json").is_file()
