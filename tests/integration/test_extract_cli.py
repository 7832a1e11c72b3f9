"""`dlperf extract` end to end: the installed console script run as a subprocess on real log trees."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlperf_tasks.report.result_json import load_result

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "data" / "fixture_logs"
DLPERF = Path(sys.executable).parent / "dlperf"


def dlperf(*args, cwd=ROOT):
    return subprocess.run([str(DLPERF), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_make_run_example_prints_table_and_invalid_trial(tmp_path):
    out = tmp_path / "result.json"
    p = dlperf("extract", "--suite", "mxnet-bert", "--log-dir", "examples/logs/mxnet/bert/bz32",
               "--batch-size-per-device", "32", "--warmup-iters", "100", "--measure-iters", "100",
               "--format", "markdown", "--output", out)
    assert p.returncode == 0, p.stderr
    assert ("| node_num | gpu_num | samples/s | speedup |\n"
            "| -------- | ------- | --------- | ------- |\n"
            "| 1        | 1       | 149.86    | 1.00    |\n"
            "| 1        | 8       | 1056.34   | 7.05    |") in p.stdout
    assert "1 of 6 trials are invalid" in p.stdout and "log ends at iteration 136, expected 200" in p.stdout
    res = load_result(out)
    assert res["dlperf"]["bz32"]["bert-base"]["1n8g"] == {
        "average_speed": 1056.34, "batch_size_per_device": 32, "median_speed": 1056.34, "speedup": 7.05}
    c8 = [c for c in res["cells"] if c["topology"] == "1n8g"][0]
    assert (c8["n_valid"], c8["n_invalid"]) == (2, 1)
    assert c8["trials"][2]["status"] == "INVALID_LOG" and c8["trials"][2]["samples"]


@pytest.mark.parametrize("suite,fixture,bz,extra,expected", [
    ("mxnet-bert", "mxnet_bert", 32, ["--warmup-iters", "100", "--measure-iters", "100"],
     {"1n1g": 149.86, "1n8g": 1056.34, "1n2g": 269.76}),
    ("tensorflow-bert", "tensorflow_bert", 32, [], {"1n1g": 103.60, "1n8g": 675.92}),
    ("mxnet-resnet50", "mxnet_resnet50", 128, [], {"1n1g": 384.05, "1n8g": 2555.20}),
    # DLPerf's timestamp rule on the synthetic fixtures (the suite's default is seed 001's summary rule)
    ("pytorch-bert", "pytorch_bert", 96, ["--speed-rule", "timestamps", "--warmup-iters", "20",
                                          "--measure-iters", "100"], {"1n1g": 463.11, "2n8g": 5431.78}),
    ("megatron-gpt", "megatron_gpt", None, [], {"1n1g": 464.12, "2n8g": 664.22}),
])
def test_fixture_trees_give_readme_speeds(tmp_path, suite, fixture, bz, extra, expected):
    tree = tmp_path / "logs"
    shutil.copytree(FIX / fixture, tree)
    args = ["extract", "--suite", suite, "--log-dir", tree, "--format", "json", *extra]
    if bz:
        args += ["--batch-size-per-device", bz]
    p = dlperf(*args)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    got = {c["topology"]: [t["value"] for t in c["trials"]] for c in doc["cells"]}
    assert got == {k: [v] for k, v in expected.items()}
    assert all(t["status"] == "OK" for c in doc["cells"] for t in c["trials"])


def test_dlperf_format_looks_like_dlperf(tmp_path):
    tree = tmp_path / "bz32"
    for topo in ("1n1g", "1n8g"):
        for i in (1, 2):
            (tree / topo).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(FIX / "tensorflow_bert/bz32" / topo / "bert_b32_fp32_1.log", tree / topo / f"bert_b32_fp32_{i}.log")
    p = dlperf("extract", "--suite", "tensorflow-bert", "--log-dir", tree, "--batch-size-per-device", "32",
               "--format", "dlperf")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == ["1n1g/bert_b32_fp32_1.log {1: 103.6}", "1n1g/bert_b32_fp32_2.log {1: 103.6, 2: 103.6}"]
    assert "{'bert': {'1n1g': {'average_speed': 103.6," in p.stdout
    assert "'speedup': 6.52}}}" in p.stdout


def test_empty_dir_fails_with_clear_message(tmp_path):
    p = dlperf("extract", "--suite", "mxnet-bert", "--log-dir", tmp_path, "--batch-size-per-device", "32")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("dlperf: error: no usable log with batch size 32 in " + str(tmp_path))
    assert "<N>n<G>g/<prefix>_b<B>_" in p.stderr and "Traceback" not in p.stderr


def test_only_invalid_trials_exit_1_but_report_them(tmp_path):
    d = tmp_path / "1n1g"
    d.mkdir()
    text = (FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log").read_text().splitlines(keepends=True)
    (d / "bert_b32_fp32_1.log").write_text("".join(text[:100]))
    p = dlperf("extract", "--suite", "mxnet-bert", "--log-dir", tmp_path, "--batch-size-per-device", "32",
               "--warmup-iters", "100", "--measure-iters", "100")
    assert p.returncode == 1
    assert "INVALID" in p.stdout and "log ends at iteration" in p.stdout
    assert "no valid trial in" in p.stderr


def test_bad_arguments_and_help():
    p = dlperf("extract", "--help")
    assert p.returncode == 0 and "examples:" in p.stdout and "--batch-size-per-device" in p.stdout
    assert "<N>n<G>g" in p.stdout
    p = dlperf("extract", "--suite", "no-such-suite", "--log-dir", ".", "--batch-size-per-device", "32")
    assert p.returncode == 2 and "no-such-suite" in p.stderr
    p = dlperf("extract", "--suite", "mxnet-bert", "--log-dir", ".", "--batch-size-per-device", "0")
    assert p.returncode == 2 and "must be >= 1" in p.stderr


def test_help_names_commands_that_exist():
    """Every `dlperf <command>` the extract help points to runs."""
    import re

    p = dlperf("extract", "--help")
    for cmd in set(re.findall(r"'dlperf ([a-z]+(?: [a-z]+)?)'", p.stdout)):
        q = dlperf(*cmd.split())
        assert q.returncode == 0, f"extract --help names 'dlperf {cmd}', which fails: {q.stderr}"


def test_csv_format_one_row_per_trial(tmp_path):
    import csv
    import io

    p = dlperf("extract", "--suite", "mxnet-bert", "--log-dir", FIX / "mxnet_bert" / "bz32", "--format", "csv",
               "--quiet")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert {r["topology"] for r in rows} == {"1n1g", "1n8g"}
    by_topo = {r["topology"]: r for r in rows}
    assert by_topo["1n1g"]["status"] == "OK" and float(by_topo["1n1g"]["value"]) > 0
    assert by_topo["1n1g"]["unit"] == "samples/s" and by_topo["1n1g"]["batch_size"] == "32"
