"""The on-disk cache of parsed built-in suites (catalog/suitecache.py, issue 28.2): a second load
in a fresh process unpickles the suite instead of reading YAML; an edited file or foreign entry
is a miss; the cached suite equals the parsed one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.catalog import loader, suitecache, yamlsrc

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(suitecache.ENV_OFF, raising=False)
    monkeypatch.setattr(loader, "_CACHE", {})
    return tmp_path / "cache" / "dlperf" / "suites"


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.pickle")) if d.is_dir() else []


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
    entry.write_bytes(b"not a pickle")
    loader._CACHE.clear()
    assert loader.load_suite("mxnet-bert") == expected


def test_turned_off_or_unwritable_stores_nothing(cache_home, monkeypatch):
    monkeypatch.setenv(suitecache.ENV_OFF, "1")
    assert loader.load_suite("mxnet-bert").id == "mxnet-bert"
    assert _entries(cache_home) == []
    monkeypatch.delenv(suitecache.ENV_OFF)
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
