"""Start-up of ``dlperf extract`` (issue 28): what the command imports, and the few stdlib jobs
done without a heavy module, checked against the module they replace.

The first test runs the real command in a fresh interpreter (the suite cache warmed by a first
run, as every run after the first finds it) and fails when one of the modules it no longer
needs is imported again: each costs the command's fixed time on every run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from dlperf_tasks.catalog import suitecache
from dlperf_tasks.core.digest import sha1_hex, sha256_hex
from dlperf_tasks.core.lazyre import lazy
from dlperf_tasks.core.pathtext import exists, is_file, path_text
from dlperf_tasks.measure.stats import median, stdev
from dlperf_tasks.report.markdown import dlperf_text_lines

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "tests" / "data" / "fixture_logs" / "pytorch_bert" / "fp16_ngc_bert_b96" / "pytorch"

#: modules the extract path (PyTorch BERT, --format dlperf) does not import any more, and why
#: they went: put one back and this fails (import it inside the function that needs it instead)
NOT_IMPORTED = {
    "tarfile": "only a .tar --log-dir needs it (measure/logtree.py)",
    "hashlib": "OpenSSL start-up; core/digest.py uses CPython's own SHA modules",
    "_hashlib": "same",
    "statistics": "measure/stats.py: median/stdev without it (exact, tested below)",
    "fractions": "via statistics",
    "decimal": "via statistics",
    "random": "via statistics or tempfile",
    "tempfile": "only a spool or a cache write needs it",
    "pathlib": "core/pathtext.py; the loader finds a built-in suite with os.path",
    "urllib.parse": "via pathlib (and the store URL checks)",
    "ipaddress": "via urllib.parse",
    "importlib.util": "only a site framework module needs it",
    "yaml": "a cached built-in suite needs no YAML",
    "jsonschema": "only a written or read result file is validated",
    "shutil": "argparse's formatter width: cli/_help.py finds it without shutil (and its bz2/lzma)",
    "pickle": "the suite cache is marshal data (catalog/suitecodec.py)",
    "shlex": "only LaunchSpec.shell needs it (frameworks/launchspec.py)",
    "dlperf_tasks.frameworks.launchspec": "NodeSpec/LaunchSpec: dlperf extract launches nothing",
    "dlperf_tasks.core.settings": "core/envkeys.py reads the one key the catalog path needs (no Settings dataclasses)",
}

_PROBE = """
import io, json, sys
from contextlib import redirect_stderr, redirect_stdout
from dlperf_tasks.cli import main
out = io.StringIO()
with redirect_stdout(out), redirect_stderr(io.StringIO()):
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _run_extract(tmp_path: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLPERF_")}
    env.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"))
    argv = ["extract", "--suite", "pytorch-bert", "--log-dir", str(TREE), "--speed-rule", "timestamps",
            "--warmup-iters", "20", "--measure-iters", "100", "--quiet", *args]
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_extract_command_imports_none_of_the_modules_it_no_longer_needs(tmp_path):
    _run_extract(tmp_path, "--format", "dlperf")  # warms the suite cache, as the first run of a machine does
    got = _run_extract(tmp_path, "--format", "dlperf")
    assert got["rc"] == 0 and "463.11" in got["out"]  # the command did its work
    back = {m: why for m, why in NOT_IMPORTED.items() if m in got["modules"]}
    assert back == {}, "imported again on dlperf extract's path (import it where it is needed)"


def test_the_probe_sees_a_module_put_back(tmp_path):
    """The check above can fail: a module imported by the command shows in the list."""
    got = _run_extract(tmp_path, "--format", "dlperf")
    assert "argparse" in got["modules"] and "dlperf_tasks.measure.extract" in got["modules"]


# ----------------------------------------------------------------- median and stdev without statistics
def _samples(rng: random.Random, kind: int) -> list[float]:
    n = rng.randint(2, 12)
    if kind == 0:
        return [round(rng.uniform(0, 5000), 2) for _ in range(n)]  # speeds as DLPerf rounds them
    if kind == 1:
        return [rng.uniform(1e-300, 1e300) for _ in range(n)]
    if kind == 2:
        return [float(rng.randint(0, 10)) for _ in range(n)]  # ties, zero variance
    if kind == 3:
        return [rng.choice([1.5, 2.5, 2.75, 0.1, 0.2, 5e-324, 1e-320, -3.25]) for _ in range(n)]
    if kind == 4:
        base = rng.uniform(0, 1e4)
        return [base + rng.choice([0.0, 1e-12, 2e-12]) for _ in range(n)]  # nearly equal: cancellation
    return [math.ldexp(rng.randint(1, 2**53), rng.randint(-1070, 960)) for _ in range(n)]


def test_median_and_stdev_are_exactly_statistics_ones():
    rng = random.Random(28)
    for i in range(6000):
        values = _samples(rng, i % 6)
        assert median(values) == statistics.median(values), values
        assert median(values[:-1] or values) == statistics.median(values[:-1] or values)
        try:
            want = statistics.stdev(values)
        except OverflowError:
            continue
        assert stdev(values) == want, values


def test_stdev_of_equal_values_is_zero_and_median_of_one_value_is_it():
    assert stdev([3.5, 3.5, 3.5]) == 0.0 == statistics.stdev([3.5, 3.5, 3.5])
    assert median([7.25]) == 7.25


# ----------------------------------------------------------------- digests, paths, lazy patterns
@pytest.mark.parametrize("data", [b"", b"x", b"extract-pytorch-bert" * 1000, bytes(range(256))])
def test_digests_are_hashlibs(data):
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert sha1_hex(data) == hashlib.sha1(data).hexdigest()


def test_path_text_is_str_of_path():
    rng = random.Random(5)
    parts = ["/", "a", ".", "b", "//", "..", "x y", "", "./", "///", "é"]
    cases = ["", ".", "/", "//", "///", "a/", "./a/./b//", "//a", "///a/b/"]
    cases += ["".join(rng.choice(parts) for _ in range(rng.randint(0, 8))) for _ in range(3000)]
    for text in cases:
        assert path_text(text) == str(Path(text)), text
    assert path_text(PurePosixPath("/a/b")) == "/a/b"


def test_exists_and_is_file_answer_as_pathlib(tmp_path):
    (tmp_path / "f").write_text("x")
    for p in [tmp_path, tmp_path / "f", tmp_path / "missing", tmp_path / "f" / "below", "bad\0name"]:
        assert (exists(str(p)), is_file(str(p))) == (Path(p).exists(), Path(p).is_file())


def test_the_suite_cache_directory_text_is_the_paths(monkeypatch):
    for base in ["/tmp/c", "/tmp/c/", "//srv/c", "///srv//./c/"]:
        monkeypatch.setenv("XDG_CACHE_HOME", base)
        monkeypatch.delenv("DLPERF_NO_SUITE_CACHE", raising=False)
        assert suitecache._cache_dir() == str(suitecache.cache_dir()) == str(Path(base) / "dlperf" / "suites")


def test_a_lazy_pattern_acts_as_the_compiled_one():
    rx = lazy(r"(?P<n>\d+)n(?P<g>\d+)g\Z")
    assert "_rx" not in vars(rx)  # nothing compiled yet
    assert rx.pattern == r"(?P<n>\d+)n(?P<g>\d+)g\Z" and rx.flags == 0 and "_rx" not in vars(rx)
    assert rx.match("2n8g")["g"] == "8" and rx.match("2n8gx") is None
    assert rx.groupindex == {"n": 1, "g": 2} and rx.sub("-", "1n1g") == "-"
    with pytest.raises(AttributeError):
        rx.no_such_method  # noqa: B018


# ----------------------------------------------------------------- --format dlperf lines
def _trial(index, value, valid=True):
    return {"index": index, "value": value, "valid": valid, "log": f"1n1g/b_{index}.log", "status": "OK", "reason": ""}


def test_dlperf_lines_show_each_growing_dict_as_repr_does():
    values = [463.11, 1e-05, 12.0, 0.1 + 0.2, 5e+20, -0.0, 463.11]
    trials = [_trial(i + 1, v) for i, v in enumerate(values)]
    trials.insert(3, _trial(2, 99.5))  # the same index again: the dict keeps its place
    trials.insert(5, _trial(9, 1.0, valid=False))
    result = {"cells": [{"metric_kind": "throughput", "trials": trials}], "dlperf": {}}
    want, acc = [], {}
    for t in trials:
        if t["valid"]:
            acc[t["index"]] = t["value"]
            want.append(f"{t['log']} {acc}")
    lines = list(dlperf_text_lines(result))
    assert lines[:len(want)] == want
    assert lines[len(want):] == ["# invalid: 1n1g/b_9.log: OK: "]


# ----------------------------------------------------------------- step_window's C-speed search
def test_step_window_bounds_are_the_first_logged_steps_at_the_window_ends():
    from dlperf_tasks.core.model import Sample
    from dlperf_tasks.frameworks._lines import step_window

    rng = random.Random(7)
    for i in range(3000):
        n, base = rng.randint(0, 40), rng.randint(1, 100)
        its = sorted(rng.sample(range(base, base + 80), n)) if i % 3 else [rng.randint(0, 60) for _ in range(n)]
        samples = [Sample(it, float(j), "s") for j, it in enumerate(its)]
        warmup, skip, stride = rng.randint(0, 20), rng.randint(0, 5), rng.choice([None, 1, 2, 5])
        total = warmup + rng.randint(0, 30)
        got = step_window(samples, stride, warmup, total, skip)
        if not its:
            assert got == (None, total + skip)
            continue
        origin = its[0] - max(stride or 1, 1)
        ends = [next((k for k, it in enumerate(its) if it >= origin + skip + b), None) for b in (warmup, total)]
        want = (None, origin + skip + total) if None in ends else (samples[ends[0]], samples[ends[1]])
        assert got == want, (its, stride, warmup, total, skip)


# ----------------------------------------------------------------- settings' one-key part
def test_settings_re_exports_the_one_key_part_unchanged():
    from dlperf_tasks.core import envkeys, settings

    for name in ("SettingsError", "SIMPLE_KEYS", "env_name", "env_value", "parse_value", "ENV_PREFIX", "MiB"):
        assert getattr(settings, name) is getattr(envkeys, name)
    assert settings.env_value("catalog_path", {"DLPERF_CATALOG_PATH": "a:b"}) == ("a", "b")
    with pytest.raises(settings.SettingsError):
        envkeys.env_value("no_suite_cache", {"DLPERF_NO_SUITE_CACHE": "maybe"})


# ----------------------------------------------------------------- the help width without shutil
@pytest.mark.parametrize("columns", [None, "40", "80", "213", "0", "-5", "abc", ""])
def test_the_help_width_and_text_are_argparses_own(monkeypatch, columns):
    import argparse
    import shutil

    from dlperf_tasks.cli import build_parser
    from dlperf_tasks.cli._help import RawDescription, terminal_columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns
    assert RawDescription("x")._width == argparse.RawDescriptionHelpFormatter("x")._width
    for only in ("extract", None):
        ours = build_parser(only)
        ours_text = [ours.format_help()] + [p.format_help() for p in _subparsers(ours)]
        for p in [ours, *_subparsers(ours)]:
            if p.formatter_class is RawDescription:
                p.formatter_class = argparse.RawDescriptionHelpFormatter
        theirs_text = [ours.format_help()] + [p.format_help() for p in _subparsers(ours)]
        assert ours_text == theirs_text


def _subparsers(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.values()
