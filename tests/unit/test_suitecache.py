"""The on-disk cache of parsed built-in suites (catalog/suitecache.py, issue 28.2): a second load
in a fresh process reads the cached suite (marshal data, catalog/suitecodec.py) instead of YAML; an edited file or foreign entry
is a miss; the cached suite equals the parsed one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.core.settings import env_name
from dlperf_tasks.catalog import loader, suitecache, yamlsrc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(env_name("no_suite_cache"), raising=False)
    monkeypatch.setattr(loader, "_CACHE", {})
    return tmp_path / "cache" / "dlperf" / "suites"


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.suite")) if d.is_dir() else []


def test_a_builtin_suite_is_stored_then_read_back_equal(cache_home):
    first = loader.load_suite("mxnet-bert")
    (entry,) = _entries(cache_home)
    assert oct(entry.stat().st_mode & 0o777) == "0o600" and oct(cache_home.stat().st_mode & 0o777) == "0o700"
    path = loader.find_suite_file("mxnet-bert")
    again = suitecache.get(str(path), path.read_bytes())
    assert again == first and again is not first


def test_a_fresh_process_loads_it_without_the_yaml_reader(cache_home):
    loader.load_suite("pytorch-bert")  # stores it
    code = ("import sys; from dlperf_tasks.catalog.loader import load_suite; s = load_suite('pytorch-bert'); "
            "print(s.id, 'yaml' in sys.modules, 'dlperf_tasks.catalog.validate' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cache_home.parents[1]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["pytorch-bert", "False", "False"]


def test_other_bytes_or_path_miss(cache_home):
    loader.load_suite("mxnet-bert")
    path = loader.find_suite_file("mxnet-bert")
    data = path.read_bytes()
    assert suitecache.get(str(path), data) is not None
    assert suitecache.get(str(path), data + b"\n# edited\n") is None
    assert suitecache.get(str(path) + "x", data) is None


def test_an_entry_others_may_write_is_not_read(cache_home):
    loader.load_suite("mxnet-bert")
    path = loader.find_suite_file("mxnet-bert")
    (entry,) = _entries(cache_home)
    entry.chmod(0o666)
    assert suitecache.get(str(path), path.read_bytes()) is None
    entry.chmod(0o600)
    cache_home.chmod(0o777)
    assert suitecache.get(str(path), path.read_bytes()) is None


def test_a_corrupt_entry_is_a_miss_and_the_suite_is_read_again(cache_home):
    expected = loader.load_suite("mxnet-bert")
    (entry,) = _entries(cache_home)
    entry.write_bytes(b"not a suite entry")
    loader._CACHE.clear()
    assert loader.load_suite("mxnet-bert") == expected


def test_turned_off_or_unwritable_stores_nothing(cache_home, monkeypatch):
    monkeypatch.setenv(env_name("no_suite_cache"), "1")
    assert loader.load_suite("mxnet-bert").id == "mxnet-bert"
    assert _entries(cache_home) == []
    monkeypatch.delenv(env_name("no_suite_cache"))
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text("a file where the directory should be")
    loader._CACHE.clear()
    assert loader.load_suite("mxnet-bert").id == "mxnet-bert"


def test_site_suites_are_not_cached(cache_home, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    src = loader.find_suite_file("mxnet-bert")
    (site / "mxnet-bert.yaml").write_bytes(src.read_bytes())
    loader.load_file(site / "mxnet-bert.yaml")
    assert _entries(cache_home) == []


def test_the_size_cap_is_the_yaml_readers():
    assert loader.MAX_BYTES == yamlsrc.MAX_BYTES


def test_old_entries_are_dropped_beyond_the_cap(cache_home, monkeypatch):
    monkeypatch.setattr(suitecache, "MAX_ENTRIES", 2)
    for i, name in enumerate(("mxnet-bert", "pytorch-bert", "tensorflow-bert")):
        loader.load_suite(name)
        for n, entry in enumerate(_entries(cache_home)):  # distinct, increasing ages
            os.utime(entry, ns=(entry.stat().st_atime_ns, (i * 10 + n) * 10**9))
    entries = _entries(cache_home)
    assert len(entries) == 2
    path = loader.find_suite_file("tensorflow-bert")
    assert suitecache.get(str(path), path.read_bytes()) is not None


# ----------------------------------------------------------------- the entry format (suitecodec)
def _deep(a, b) -> None:
    """``a`` and ``b`` equal with the same types all the way down (and the same __dict__ order)."""
    assert type(a) is type(b)
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _deep(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _deep(k, next(x for x in b if x == k))
            _deep(a[k], b[k])
    elif isinstance(a, frozenset):
        assert a == b
    elif hasattr(a, "__dict__"):
        _deep(vars(a), vars(b))
    else:
        assert a == b or (a != a and b != b)


def test_every_builtin_suite_reads_back_as_it_was_written():
    from dlperf_tasks.catalog import list_suites
    from dlperf_tasks.catalog.suitecodec import dumps, loads

    suites = list_suites()
    assert len(suites) >= 5
    for suite in suites:
        back = loads(dumps(suite))
        _deep(suite, back)
        assert back == suite and repr(back) == repr(suite)


def test_what_the_format_does_not_hold_is_refused_and_garbage_is_no_suite():
    import dataclasses
    import marshal
    from collections import OrderedDict

    from dlperf_tasks.catalog import load_suite
    from dlperf_tasks.catalog.suitecodec import TAG, dumps, loads

    suite = load_suite("pytorch-bert")
    for odd in (OrderedDict(a=1), (b"x", 1), {1, 2}, object(), b"raw"):
        with pytest.raises(TypeError):
            dumps(dataclasses.replace(suite, extra={"odd": odd}))
    with pytest.raises(TypeError):
        dumps(suite.window)
    for data in (b"", b"garbage", marshal.dumps((b"other", "Suite", {})), marshal.dumps((TAG, "Window", {})),
                 marshal.dumps((TAG, "Nope", {})), marshal.dumps({"a": 1})):
        with pytest.raises((ValueError, EOFError, KeyError, TypeError)):
            loads(data)
