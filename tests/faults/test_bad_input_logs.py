"""Bad input: corrupt training logs ("corrupt logs").

Every case goes through a real entry point: :func:`dlperf_tasks.measure.extract.extract_tree` (what
``dlperf extract``, the sweep and the Airflow tasks call) or the ``dlperf extract`` CLI itself.
Starting point is always a real fixture log (tests/data/fixture_logs, DLPerf's own numbers), then
damaged: binary garbage, NaN / inf / negative numbers in the field the speed rule reads, the
last line cut in the middle of that field, the run cut mid-way, NUL bytes, CRLF, garbage lines
between valid ones, an empty file, a 1 GiB log, a 256 MiB line without a newline, a truncated
.tar.gz. The rule asserted everywhere: the trial ends ``INVALID_LOG`` with a reason naming the
problem (or stays ``OK`` with DLPerf's exact speed when what the speed rule reads is intact),
and nothing crashes.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import ExtractError
from dlperf_tasks.measure.extract import extract_tree
from dlperf_tasks.core.model import TrialStatus, Window

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "data" / "fixture_logs"


class Spec:
    """One framework's fixture and where its speed rule reads the numbers."""

    def __init__(self, suite, fixture, dest, bz, window, speed, iter_re, field_re, last_needed):
        self.suite, self.fixture, self.dest, self.bz, self.window = suite, fixture, dest, bz, window
        self.speed = speed  # DLPerf's speed for the intact fixture (fixture README)
        self.iter_re = re.compile(iter_re)  # an iteration line; group 1 = iteration number
        self.field_re = re.compile(field_re)  # the number the speed rule reads; group 1
        self.last_needed = last_needed  # the last iteration the speed rule needs


SPECS = {
    # MXNet BERT: speed from 'latency=X ms/batch' of steps 101-200 (fixture README)
    "mxnet_bert": Spec("mxnet-bert", "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log", "1n1g/bert_b32_fp32_1.log", 32,
                       Window(100, 100), 149.86, rb"\[step (\d+)\]\t", rb"latency=([0-9.]+) ms", 200),
    # MXNet ResNet50: 'Speed: X samples/sec' of batches 21-120
    "mxnet_resnet50": Spec("mxnet-resnet50", "mxnet_resnet50/bz128/1n1g/rn50_b128_fp32_1.log",
                           "1n1g/rn50_b128_fp32_1.log", 128, None, 384.05, rb"Epoch\[0\] Batch\[(\d+)\]\t",
                           rb"Speed: ([0-9.]+) samples", 120),
    # TensorFlow BERT: the absl time stamp of 'Train Step' lines 20 and 120
    "tensorflow_bert": Spec("tensorflow-bert", "tensorflow_bert/bz32/1n1g/bert_b32_fp32_1.log",
                            "1n1g/bert_b32_fp32_1.log", 32, None, 103.60, rb"Train Step: (\d+)/",
                            rb"^I\d{4} (\d\d:\d\d:\d\d\.\d+) ", 120),
    # PyTorch BERT: the DLL time stamp of steps 25 and 125 (DLPerf's timestamp rule on the synthetic fixture;
    # the suite's default is seed 001's summary rule, tested on seed 001's own logs)
    "pytorch_bert": Spec("pytorch-bert",
                         "pytorch_bert/fp16_ngc_bert_b96/pytorch/1n1g/bert-base-adam-training_b96_fp16_1.log",
                         "1n1g/bert-base-adam-training_b96_fp16_1.log", 96, Window(20, 100), 463.11,
                         rb"Training Iteration: (\d+) ", rb"^DLL (\S+ \S+) - ", 125),
    # Megatron GPT: 'elapsed time per iteration (ms): X' of iterations 11-130
    "megatron_gpt": Spec("megatron-gpt",
                         "megatron_gpt/megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_l16_hsz1536_ahs16_pretrain_0.log",
                         "megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_l16_hsz1536_ahs16_pretrain_0.log", None, None,
                         464.12, rb" iteration +(\d+)/", rb"per iteration \(ms\): ([0-9.]+)", 130),
}


def _lines(spec: Spec) -> list[bytes]:
    return (FIX / spec.fixture).read_bytes().split(b"\n")


def _iteration_lines(spec: Spec, lines: list[bytes]) -> dict[int, int]:
    """iteration -> line index"""
    out = {}
    for i, line in enumerate(lines):
        m = spec.iter_re.search(line)
        if m:
            out.setdefault(int(m.group(1)), i)
    return out


def _replace_field(spec: Spec, lines: list[bytes], idx: int, new: bytes) -> bytes:
    out = list(lines)
    m = spec.field_re.search(out[idx])
    assert m, out[idx]
    out[idx] = out[idx][:m.start(1)] + new + out[idx][m.end(1):]
    return b"\n".join(out)


def corrupt(spec: Spec, kind: str) -> bytes:
    """The fixture log damaged in one way (see module docstring)."""
    lines = _lines(spec)
    its = _iteration_lines(spec, lines)
    measured = its[sorted(i for i in its if i <= spec.last_needed)[-5]]  # a line inside the measured window
    if kind == "nan":
        return _replace_field(spec, lines, measured, b"nan")
    if kind == "inf":
        return _replace_field(spec, lines, measured, b"inf")
    if kind == "negative":
        return _replace_field(spec, lines, measured, b"-5.0")
    if kind == "cut_mid_line":  # the run ends in the middle of the field of the last needed iteration
        idx = its[spec.last_needed]
        m = spec.field_re.search(lines[idx])
        cut = sum(len(x) + 1 for x in lines[:idx]) + (m.start(1) + m.end(1)) // 2
        return b"\n".join(lines)[:cut]
    if kind == "cut_mid_run":  # killed half-way: no more lines
        return b"\n".join(lines[: its[sorted(its)[len(its) // 2]]])
    if kind == "binary":
        return random.Random(6).randbytes(64 * 1024)
    if kind == "empty":
        return b""
    if kind == "nul_bytes":  # NULs after every line (a log file pre-allocated and partly written)
        return b"\n".join(lines).replace(b"\n", b"\x00\x00\n") + b"\x00" * 4096
    if kind == "crlf":
        return b"\r\n".join(lines)
    if kind == "garbage_between_lines":  # binary noise lines between the valid ones
        rng = random.Random(7)
        noise = [bytes(b for b in rng.randbytes(60) if b not in (10, 13)) for _ in lines]
        return b"\n".join(x for pair in zip(lines, noise) for x in pair)
    if kind == "latin1_and_invalid_utf8":
        return b"\n".join(lines).replace(b"\n", b" \xe9\xff\xfe\n")
    raise AssertionError(kind)


#: kind -> (expected status, words the reason must contain); None reason = OK with DLPerf's speed
EXPECT = {
    "nan": (TrialStatus.INVALID_LOG, ["nan"]),
    "inf": (TrialStatus.INVALID_LOG, ["inf"]),
    "negative": (TrialStatus.INVALID_LOG, ["-5.0"]),
    "cut_mid_line": (TrialStatus.INVALID_LOG, None),  # reason checked per framework below
    "cut_mid_run": (TrialStatus.INVALID_LOG, ["truncated or crashed run"]),
    "binary": (TrialStatus.INVALID_LOG, ["no iteration lines"]),
    "empty": (TrialStatus.INVALID_LOG, ["no iteration lines"]),
    "nul_bytes": (TrialStatus.OK, None),
    "crlf": (TrialStatus.OK, None),
    "garbage_between_lines": (TrialStatus.OK, None),
    "latin1_and_invalid_utf8": (TrialStatus.OK, None),
}


def _extract_one(tmp_path: Path, spec: Spec, data: bytes):
    tree = tmp_path / "logs"
    p = tree / spec.dest
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    res = extract_tree(load_suite(spec.suite), tree, spec.bz, spec.window)
    (trial,) = res.trials
    return trial, res


@pytest.mark.parametrize("fw", sorted(SPECS))
@pytest.mark.parametrize("kind", list(EXPECT))
def test_corrupt_log_gives_invalid_trial_with_reason_or_exact_speed(tmp_path, fw, kind):
    spec = SPECS[fw]
    trial, res = _extract_one(tmp_path, spec, corrupt(spec, kind))
    status, words = EXPECT[kind]
    assert trial.status == status, (trial.status, trial.reason)
    if status == TrialStatus.OK:
        assert trial.reason == "" and round(trial.metric.value, 2) == spec.speed
        assert res.cells[0].n_valid == 1 and res.cells[0].median == spec.speed
        return
    assert trial.reason, "an invalid trial must say why"
    for w in words or []:
        assert w in trial.reason, trial.reason
    if kind == "cut_mid_line":
        # either the cut line is reported as unreadable or the last needed iteration as missing
        assert (f"{spec.last_needed}" in trial.reason or "unreadable" in trial.reason
                or "without" in trial.reason), trial.reason
    # never averaged: the cell has no valid trial, so no median and no speedup
    (cell,) = res.cells
    assert cell.n_valid == 0 and cell.n_invalid == 1 and cell.median is None


def test_log_cut_after_the_measured_window_is_still_valid(tmp_path):
    """PyTorch runs to step 150 but DLPerf's rule stops at step 125: a run killed at step 140
    still has everything the rule reads, so it is OK with the exact speed (not thrown away)."""
    spec = SPECS["pytorch_bert"]
    lines = _lines(spec)
    its = _iteration_lines(spec, lines)
    data = b"\n".join(lines[: its[140]]) + b"\nDLL 2020-09-24 03:15:4"
    trial, _ = _extract_one(tmp_path, spec, data)
    assert trial.status == TrialStatus.OK and round(trial.metric.value, 2) == 463.11


def test_crash_marker_after_valid_numbers_invalidates(tmp_path):
    """A complete set of iterations followed by a Traceback / NCCL error is not a clean run."""
    spec = SPECS["mxnet_bert"]
    data = (FIX / spec.fixture).read_bytes() + b"Traceback (most recent call last):\nNCCL error in: x.cpp:1\n"
    trial, _ = _extract_one(tmp_path, spec, data)
    assert trial.status == TrialStatus.INVALID_LOG
    assert "Traceback" in trial.reason and "NCCL error" in trial.reason
    assert round(trial.metric.value, 2) == 149.86  # raw value kept for the report, not averaged


def test_dlperf_extract_cli_reports_corrupt_trials_without_traceback(tmp_path):
    """The CLI on a tree with one good, one NaN, one binary and one empty log: exit 0 (some
    trials valid), the invalid ones listed with their reasons, no traceback."""
    spec = SPECS["mxnet_bert"]
    tree = tmp_path / "logs" / "1n1g"
    tree.mkdir(parents=True)
    (tree / "bert_b32_fp32_1.log").write_bytes((FIX / spec.fixture).read_bytes())
    (tree / "bert_b32_fp32_2.log").write_bytes(corrupt(spec, "nan"))
    (tree / "bert_b32_fp32_3.log").write_bytes(corrupt(spec, "binary"))
    (tree / "bert_b32_fp32_4.log").write_bytes(b"")
    r = subprocess.run([sys.executable, "-m", "dlperf_tasks", "extract", "--suite", "mxnet-bert", "--log-dir",
                        str(tmp_path / "logs"), "--warmup-iters", "100", "--measure-iters", "100", "--format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    (cell,) = doc["cells"]
    assert (cell["n_valid"], cell["n_invalid"], cell["median_speed"]) == (1, 3, 149.86)
    reasons = {t["index"]: t["reason"] for t in cell["trials"] if not t["valid"]}
    assert "nan" in reasons[2] and "no iteration lines" in reasons[3] and "no iteration lines" in reasons[4]
    json.dumps(doc, allow_nan=False)  # the document is strict JSON even with NaN in a log


def _tree_tar(tmp_path: Path) -> Path:
    tree = tmp_path / "logs"
    shutil.copytree(FIX / "mxnet_bert" / "bz32", tree)
    tgz = tmp_path / "logs.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(tree, arcname="logs")
    return tgz


@pytest.mark.parametrize("keep", [100, 0.5])
def test_truncated_tar_gz_is_a_clear_error_naming_the_archive(tmp_path, keep):
    tgz = _tree_tar(tmp_path)
    data = tgz.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(ExtractError, match=r"archive .*cut\.tar\.gz is truncated or corrupt"):
        extract_tree(load_suite("mxnet-bert"), cut, 32, Window(100, 100))
    r = subprocess.run([sys.executable, "-m", "dlperf_tasks", "extract", "--suite", "mxnet-bert", "--log-dir",
                        str(cut)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("dlperf: error: archive ") and "cut.tar.gz" in r.stderr


def test_tar_with_hostile_member_names_is_read_not_unpacked(tmp_path):
    """Member names with ``../`` and absolute paths are only read in memory, never written."""
    log = (FIX / "mxnet_bert/bz32/1n1g/bert_b32_fp32_1.log").read_bytes()
    tgz = tmp_path / "evil.tar"
    import io

    with tarfile.open(tgz, "w") as tf:
        for name in ["../../escaped/1n1g/bert_b32_fp32_1.log", "/abs/1n1g/bert_b32_fp32_2.log"]:
            info = tarfile.TarInfo(name)
            info.size = len(log)
            tf.addfile(info, io.BytesIO(log))
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    res = extract_tree(load_suite("mxnet-bert"), tgz, 32, Window(100, 100))
    assert sorted(t.status.value for t in res.trials) == ["OK", "OK"]
    assert not (tmp_path.parent / "escaped").exists() and not Path("/abs").exists()
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before


# ------------------------------------------------------------------------------- big logs
_RSS_PROBE = r"""
import json, resource, sys, time
from dlperf_tasks.cli import main
t = time.monotonic()
rc = main(sys.argv[1:])
# VmHWM = peak RSS of this address space. getrusage's ru_maxrss survives execve, so it would
# report the (large) pytest parent's RSS at fork time instead of this process's own peak.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"rc": rc, "seconds": time.monotonic() - t, "max_rss_kib": hwm,
                  "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), file=sys.stderr)
"""


def _run_extract_measured(args: list[str], timeout: int) -> tuple[dict, dict]:
    """``dlperf extract ARGS --format json`` in a fresh interpreter; returns (result doc, rusage)."""
    r = subprocess.run([sys.executable, "-c", _RSS_PROBE, "extract", *args, "--format", "json"],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    probe = json.loads(r.stderr.strip().splitlines()[-1])
    return json.loads(r.stdout), probe


@pytest.mark.slow
def test_one_gib_log_is_streamed_with_bounded_memory(tmp_path):
    """A 1 GiB log (the real fixture with 1 GiB of NCCL chatter between its step lines) is
    parsed in one pass: the trial is OK with DLPerf's exact speed, and the peak RSS of the
    whole ``dlperf extract`` process stays far below the file size."""
    spec = SPECS["mxnet_bert"]
    lines = _lines(spec)
    steps = set(_iteration_lines(spec, lines).values())
    noise = (b"gpu-node-a:4242:4290 [0] NCCL INFO Channel 00/02 : 0[1a000] -> 1[1b000] via P2P/IPC/read "
             + b"ring 0 1 2 3 4 5 6 7 " * 20 + b"\n")
    target = 1 << 30
    block = noise * ((target // len(steps)) // len(noise) + 1)
    log = tmp_path / "logs" / spec.dest
    log.parent.mkdir(parents=True)
    try:
        with open(log, "wb") as fh:
            for i, line in enumerate(lines):
                fh.write(line + b"\n")
                if i in steps:
                    fh.write(block)
        size = log.stat().st_size
        assert size >= target
        doc, probe = _run_extract_measured(["--suite", "mxnet-bert", "--log-dir", str(tmp_path / "logs"),
                                            "--warmup-iters", "100", "--measure-iters", "100"], timeout=900)
    finally:
        log.unlink(missing_ok=True)
    (cell,) = doc["cells"]
    assert probe["rc"] == 0 and cell["n_valid"] == 1 and cell["median_speed"] == 149.86
    print(f"1 GiB log: {size / 2**20:.0f} MiB parsed in {probe['seconds']:.1f} s, "
          f"peak RSS {probe['max_rss_kib'] / 1024:.0f} MiB")
    assert probe["max_rss_kib"] < 200 * 1024, probe  # < 200 MiB for a 1024 MiB log


@pytest.mark.slow
def test_huge_line_without_newline_is_cut_not_loaded(tmp_path):
    """256 MiB of binary garbage without a single line break, then a valid log: memory stays
    bounded (lines are cut at 256 KiB) and the garbage does not hide the valid trial next to it."""
    spec = SPECS["mxnet_bert"]
    d = tmp_path / "logs" / "1n1g"
    d.mkdir(parents=True)
    chunk = bytes(b for b in random.Random(3).randbytes(1 << 20) if b not in (10, 13))
    with open(d / "bert_b32_fp32_1.log", "wb") as fh:
        for _ in range(256 * (1 << 20) // len(chunk) + 1):
            fh.write(chunk)
    (d / "bert_b32_fp32_2.log").write_bytes((FIX / spec.fixture).read_bytes())
    try:
        doc, probe = _run_extract_measured(["--suite", "mxnet-bert", "--log-dir", str(tmp_path / "logs"),
                                            "--warmup-iters", "100", "--measure-iters", "100"], timeout=600)
    finally:
        (d / "bert_b32_fp32_1.log").unlink()
    (cell,) = doc["cells"]
    trials = {t["index"]: t for t in cell["trials"]}
    assert trials[1]["status"] == "INVALID_LOG" and "no iteration lines" in trials[1]["reason"]
    assert trials[2]["status"] == "OK" and cell["median_speed"] == 149.86
    print(f"256 MiB line: {probe['seconds']:.1f} s, peak RSS {probe['max_rss_kib'] / 1024:.0f} MiB")
    assert probe["max_rss_kib"] < 200 * 1024, probe
