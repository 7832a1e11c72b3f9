"""File collisions, Megatron names, trial dirs, cases by name, and extract file
safety: FIFO, /dev/zero, symlinks out of the tree, caps, control characters, a tar.gz of newlines)."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import threading
import time

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.core.errors import ExtractError
from dlperf_tasks.measure.extract import extract_tree
from dlperf_tasks.core.model import TrialStatus, Window
from dlperf_tasks.report.result_json import extract_result
from tests.unit import logwriters as W

TF_OK = W.tf(list(range(1, 121)), 0.1)  # 32 x 1 / 0.1 = 320 samples/s


def _tf_suite():
    return load_suite("tensorflow-bert")


def _bounded(fn, seconds: float):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it takes longer than ``seconds``."""
    out: dict = {}

    def go():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"], time.monotonic() - start


# ------------------------------------------------------------------ 11.9 two files for one trial
@pytest.mark.parametrize("a,b", [("bert_b32_amp_1.log", "bert_b32_fp16_1.log"),
                                 ("bert_b32_fp32_1.log", "bert_b32_fp32_1.node0.log")])
def test_two_files_for_one_trial_are_refused_naming_both(tmp_path, a, b):
    W.write(tmp_path / "1n1g" / a, TF_OK)
    W.write(tmp_path / "1n1g" / b, TF_OK)
    with pytest.raises(ExtractError) as ei:
        extract_tree(_tf_suite(), tmp_path)
    msg = str(ei.value)
    assert f"1n1g/{a}" in msg and f"1n1g/{b}" in msg and "two files for node 0" in msg


def test_accumulation_cells_from_names_stay_apart_and_are_checked_against_the_log(tmp_path):
    """pytorch-bert's ``_ga<N>`` cells (seed 001's GradAcc and "no GradAcc" runs) are two cells; a log
    whose Config line says another accumulation than its name is invalid, naming both."""
    W.write(tmp_path / "1n1g" / "bert_b96_fp16_ga32_1.log", W.dle(list(range(1, 131)), 96 * 32 / 500.0, acc=32))
    W.write(tmp_path / "1n1g" / "bert_b96_fp16_ga1_1.log", W.dle(list(range(1, 131)), 96 / 400.0, acc=1))
    W.write(tmp_path / "1n1g" / "bert_b96_fp16_ga1_2.log", W.dle(list(range(1, 131)), 96 / 400.0, acc=4))
    res = extract_tree(load_suite("pytorch-bert"), tmp_path, window=Window(20, 100))  # DLPerf's timestamp rule
    by = {(t.trial.cell.accumulation, t.trial.index): t for t in res.trials}
    assert by[(32, 1)].metric.value == pytest.approx(500.0, abs=0.02) and by[(32, 1)].valid
    assert by[(1, 1)].metric.value == pytest.approx(400.0, abs=0.02) and by[(1, 1)].valid
    assert not by[(1, 2)].valid
    assert "log's gradient accumulation is 4 (DLE PARAMETER Config line), the cell's is 1" in by[(1, 2)].reason
    assert len(res.cells) == 2


# ------------------------------------------------------------------ 11.10 Megatron
def _meg(tmp_path, rel: str, latency: float):
    return W.write(tmp_path / rel, W.megatron(list(range(10, 131, 10)), latency))


def test_megatron_counts_every_trial_directory(tmp_path):
    name = "megatron_lm_perf_1n1g_dp1_mp1_pp1_mbs2_gbs2_l16_hsz1536_ahs16_pretrain_0.log"
    for t, lat in [(1, 464.0), (2, 465.0), (3, 466.0)]:
        _meg(tmp_path, f"DP_1x1x1_2_1536x16/1n1g/{t}/{name}", lat)
    res = extract_tree(load_suite("megatron-gpt"), tmp_path)
    assert sorted(r.trial.index for r in res.trials) == [1, 2, 3]
    (cell,) = res.cells
    assert cell.n_valid == 3 and cell.median == 465.0


def test_megatron_same_layout_different_case_names_stay_apart(tmp_path):
    """DP_8x1x1 and 2D_8x1x1 have the same numbers: the case directory names them apart."""
    name = "megatron_lm_perf_1n8g_dp8_mp1_pp1_mbs2_gbs16_pretrain_0.log"
    _meg(tmp_path, f"DP_8x1x1_16_1536x16/1n8g/1/{name}", 480.96)
    _meg(tmp_path, f"2D_8x1x1_16_1536x16/1n8g/1/{name}", 480.22)
    res = extract_tree(load_suite("megatron-gpt"), tmp_path)
    got = {c.cell.layout.case: c.median for c in res.cells}
    assert got == {"DP_8x1x1_16_1536x16": 480.96, "2D_8x1x1_16_1536x16": 480.22}


def test_megatron_ambiguous_unnamed_case_is_not_merged(tmp_path):
    _meg(tmp_path, "megatron_lm_perf_1n8g_dp8_mp1_pp1_mbs2_gbs16_pretrain_0.log", 480.96)
    with pytest.raises(ExtractError) as ei:
        extract_tree(load_suite("megatron-gpt"), tmp_path)
    assert "matches catalog cases DP_8x1x1_16_1536x16 and 2D_8x1x1_16_1536x16" in str(ei.value)


@pytest.mark.parametrize("name,case", [
    ("megatron_pretrain_gpt_1n1d_dp1_mp1_pp1_mbz8_gbz8_s2048_l12_h768_nh12_rank0.log", "MP_1x1x1_8_768x12"),
    ("megatron_lm_perf_2n8g_dp1_mp16_pp1_mbs16_gbs16_MP_1x16x1_16_3072x16_1.log", "MP_1x16x1_16_3072x16"),
    ("megatron_lm_perf_4n8g_dp8_mp1_pp4_mbs2_gbs512_pretrain_1536_16_16_3.log", "DP_PP_8x1x4_512_1536x16"),
])
def test_megatron_seed_002_names_are_accepted(tmp_path, name, case):
    _meg(tmp_path, name, 600.0)
    res = extract_tree(load_suite("megatron-gpt"), tmp_path)
    assert [t.trial.cell.layout.case for t in res.trials] == [case]


# ------------------------------------------------------------------ 13.6 safety
def test_fifo_and_dev_zero_do_not_hang(tmp_path):
    W.write(tmp_path / "1n1g" / "bert_b32_fp32_1.log", TF_OK)
    os.mkfifo(tmp_path / "1n1g" / "bert_b32_fp32_2.log")
    os.symlink("/dev/zero", tmp_path / "1n1g" / "bert_b32_fp32_3.log")
    res, took = _bounded(lambda: extract_tree(_tf_suite(), tmp_path), 20)
    assert [t.trial.index for t in res.trials] == [1]
    why = dict(res.skipped)
    assert why["1n1g/bert_b32_fp32_2.log"].startswith("not a regular file")
    assert why["1n1g/bert_b32_fp32_3.log"] == "symlink pointing outside the log tree (not followed)"


def test_symlink_out_of_the_tree_is_not_followed(tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("Traceback (most recent call last) TOP-SECRET-CONTENT\n" + TF_OK)
    tree = tmp_path / "tree"
    W.write(tree / "1n1g" / "bert_b32_fp32_1.log", TF_OK)
    os.symlink(secret, tree / "1n1g" / "bert_b32_fp32_2.log")
    res = extract_tree(_tf_suite(), tree)
    assert "TOP-SECRET" not in repr(extract_result(res))
    assert [t.trial.index for t in res.trials] == [1]


def test_directory_named_with_a_newline_is_not_a_topology(tmp_path):
    W.write(tmp_path / "1n1g\n" / "bert_b32_fp32_1.log", TF_OK)
    with pytest.raises(ExtractError) as ei:
        extract_tree(_tf_suite(), tmp_path)
    assert "control character in the name" in str(ei.value)


def test_caps_on_file_size_and_lines_give_a_reason(tmp_path, monkeypatch):
    import dlperf_tasks.measure.extract as ex
    import dlperf_tasks.measure.logtree as lt

    W.write(tmp_path / "1n1g" / "bert_b32_fp32_1.log", TF_OK)
    monkeypatch.setattr(lt, "MAX_LOG_BYTES", 2000)
    (r,) = extract_tree(_tf_suite(), tmp_path).trials
    assert r.status == TrialStatus.INVALID_LOG and "larger than 2000 bytes (cap on file size)" in r.reason
    monkeypatch.setattr(lt, "MAX_LOG_BYTES", 4 << 30)
    monkeypatch.setattr(ex, "MAX_TRIAL_LINES", 30)
    (r,) = extract_tree(_tf_suite(), tmp_path).trials
    assert r.status == TrialStatus.INVALID_LOG and "more than 30 lines (cap on lines per trial)" in r.reason


def test_a_tar_gz_of_64_mib_of_newlines_is_bounded_in_time(tmp_path):
    data = b"\n" * (64 << 20)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("1n1g/bert_b32_fp32_1.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    arch = tmp_path / "logs.tar.gz"
    arch.write_bytes(buf.getvalue())
    res, took = _bounded(lambda: extract_tree(_tf_suite(), arch, window=Window(20, 100)), 60)
    (r,) = res.trials
    assert r.status == TrialStatus.INVALID_LOG
    assert took < 30, took
    assert gzip  # (module used by tarfile; imported to make the dependency explicit)
