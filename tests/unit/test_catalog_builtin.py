"""The built-in suites validated at install (``dlperf catalog build``, catalog/builtin.py): the stored
suites equal what the YAML path builds, an edited file or a data file of another format is read as YAML
again, and a suite that cannot be stored as JSON is refused."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from dlperf_tasks.catalog import builtin, loader
from dlperf_tasks.core.errors import CatalogError

BUILTIN_FILES = sorted(f for f in os.listdir(loader._BUILTIN) if f.endswith((".yaml", ".yml")))


def _yaml_suite(fname: str):
    name = os.path.join(loader._BUILTIN, fname)
    with open(name, "rb") as fh:
        raw = fh.read()
    return name, raw, loader._parse_yaml(name, raw, schema=True)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("builtin") / "builtin_suites.json")
    files = loader.build_builtin(path)
    assert sorted(os.path.basename(f) for f in files) == BUILTIN_FILES
    return path


@pytest.mark.parametrize("fname", BUILTIN_FILES)
def test_stored_suite_equals_the_yaml_suite(data_file, fname):
    name, raw, expected = _yaml_suite(fname)
    got = builtin.validated(name, raw, data_file)
    assert got is not None and got == expected
    # every field, container and layout types included (== on a dataclass compares tuples to lists as unequal)
    for f in dataclasses.fields(expected):
        assert type(getattr(got, f.name)) is type(getattr(expected, f.name)), f.name
    # and every mapping in the same order (== on dicts does not see it; the catalog table and env do)
    assert json.dumps(builtin.suite_to_data(got)) == json.dumps(builtin.suite_to_data(expected))


def test_edited_file_is_not_taken_from_the_data(data_file):
    name, raw, _ = _yaml_suite("pytorch-bert.yaml")
    assert builtin.validated(name, raw + b"\n# edited\n", data_file) is None
    assert builtin.validated(os.path.join(loader._BUILTIN, "no-such.yaml"), raw, data_file) is None


def test_other_format_or_broken_data_is_not_used(data_file, tmp_path):
    name, raw, _ = _yaml_suite("smoke.yaml")
    with open(data_file, encoding="utf-8") as fh:
        doc = json.load(fh)
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(doc, format=builtin.FORMAT + 1)))
    assert builtin.validated(name, raw, str(other)) is None
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc)[:100])
    assert builtin.validated(name, raw, str(broken)) is None
    assert builtin.validated(name, raw, str(tmp_path / "missing.json")) is None


def test_a_suite_that_does_not_survive_json_is_refused(tmp_path):
    name, raw, suite = _yaml_suite("smoke.yaml")
    odd = dataclasses.replace(suite, launcher={**suite.launcher, 3: "an int key"})
    target = tmp_path / "out.json"
    with pytest.raises(ValueError, match="does not survive its JSON form"):
        builtin.write({"smoke.yaml": (raw, odd)}, str(target))
    assert not target.exists()


def test_build_stops_on_an_invalid_builtin_file(monkeypatch, tmp_path):
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "smoke.yaml").write_bytes(open(os.path.join(loader._BUILTIN, "smoke.yaml"), "rb").read()
                                        + b"no_such_key: 1\n")
    monkeypatch.setattr(loader, "_BUILTIN", str(suites))
    target = tmp_path / "out.json"
    with pytest.raises(CatalogError, match="no_such_key"):
        loader.build_builtin(str(target))
    assert not target.exists()


def test_load_suite_takes_the_stored_suite_and_reads_an_edited_one_as_yaml(monkeypatch, tmp_path):
    """Through the loader: the stored suite while the file is unchanged (a stored suite that differs
    shows it was taken), the YAML after an edit."""
    suites = tmp_path / "suites"
    suites.mkdir()
    raw = open(os.path.join(loader._BUILTIN, "smoke.yaml"), "rb").read()
    (suites / "smoke.yaml").write_bytes(raw)
    monkeypatch.setattr(loader, "_BUILTIN", str(suites))
    monkeypatch.delenv("DLPERF_CATALOG_PATH", raising=False)
    target = str(tmp_path / "out.json")
    loader.build_builtin(target)
    doc = json.loads(open(target, encoding="utf-8").read())
    doc["suites"]["smoke.yaml"]["suite"]["description"] = "from the stored data"
    with open(target, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    monkeypatch.setattr(builtin, "DATA_FILE", target)
    monkeypatch.setattr(loader, "_CACHE", {})
    assert loader.load_suite("smoke").description == "from the stored data"
    (suites / "smoke.yaml").write_bytes(raw + b"\n")
    os.utime(suites / "smoke.yaml", ns=(1, 1))  # another mtime than the cached load's
    assert loader.load_suite("smoke").description != "from the stored data"


def test_dlperf_catalog_build_writes_the_data_file_the_loader_reads():
    """The command ``make install`` runs (it rewrites the same content in the checkout's data file)."""
    out = subprocess.run([sys.executable, "-m", "dlperf_tasks", "catalog", "build"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{builtin.DATA_FILE}: {len(BUILTIN_FILES)} built-in suites validated"
    for fname in BUILTIN_FILES:
        name, raw, expected = _yaml_suite(fname)
        assert builtin.validated(name, raw) == expected
