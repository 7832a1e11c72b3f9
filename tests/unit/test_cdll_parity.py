"""The compiled PyTorch BERT scanners (``_cdll``) give the pure-Python path's results.

Every log is parsed twice, once with the C modules and once with their module attributes set to None
(the pure-Python path, the reference), and the whole ParsedLog is compared: samples columns, facts,
extra. Genuine and fixture logs, variants of them (midnight, repeated steps, non-ASCII, NUL, \\r,
odd numbers, truncated lines, huge numbers, blocks cut mid-line) and the extract result of a tree.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import _native
from dlperf_tasks.frameworks import pytorch_bert_stream as pb

DATA = Path(__file__).resolve().parents[1] / "data"
GENUINE = sorted(p for p in (DATA / "genuine_logs" / "dle_pytorch").rglob("*") if p.is_file() and p.suffix != ".md")
FIXTURES = sorted(p for p in (DATA / "fixture_logs" / "pytorch_bert").rglob("*.log"))
FIXTURE_1 = DATA / "fixture_logs/pytorch_bert/fp16_ngc_bert_b96/pytorch/1n1g/bert-base-adam-training_b96_fp16_1.log"


def read(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def parse(data: bytes | str, piece: int = 1 << 20):
    st = pb.PytorchBertStream()
    for i in range(0, len(data), piece):
        st.feed(data[i:i + piece])
    return st.close()


def key(parsed) -> tuple:
    s = parsed.samples
    cols = tuple(list(map(repr, getattr(s, c))) for c in ("iteration", "value", "unit", "rank", "timestamp",
                                                           "memory_mib", "loss"))
    return cols, repr(parsed.facts), repr(parsed.extra)


def python_path(monkeypatch) -> None:
    monkeypatch.setattr(_native, "dll_scan", None)
    monkeypatch.setattr(_native, "log_text", None)
    monkeypatch.setattr(_native, "lines", None)


def both(monkeypatch, data, piece: int = 1 << 20) -> tuple[tuple, tuple]:
    fast = key(parse(data, piece))
    with monkeypatch.context() as m:
        python_path(m)
        slow = key(parse(data, piece))
    return fast, slow


def test_the_extensions_are_built_and_used():
    """No silent fallback in this checkout: ``make install`` / setup.py build_ext builds them."""
    from dlperf_tasks.frameworks import _cdll  # an ImportError fails the test

    assert _native.dll_scan is _cdll.scan and "_cdll" not in _native.problems
    used = []
    real = pb.PytorchBertStream._scan_fast

    def spy(self, *args):
        used.append(1)
        return real(self, *args)

    pb.PytorchBertStream._scan_fast = spy
    try:
        parsed = parse(FIXTURE_1.read_bytes())
    finally:
        pb.PytorchBertStream._scan_fast = real
    assert used and len(parsed.samples) == 150


@pytest.mark.parametrize("path", GENUINE + FIXTURES, ids=lambda p: p.name[-60:])
@pytest.mark.parametrize("piece", [1 << 20, 4096, 777])
def test_logs_same_parsed_log(monkeypatch, path, piece):
    fast, slow = both(monkeypatch, read(path), piece)
    assert fast == slow


def _variants() -> dict[str, str]:
    text = FIXTURE_1.read_text()
    lines = text.split("\n")
    steps = [i for i, ln in enumerate(lines) if "Training Iteration: " in ln]
    mid = steps[len(steps) // 2]

    def edit(fn) -> str:
        out = list(lines)
        fn(out)
        return "\n".join(out)

    def at(i: int, old: str, new: str):
        return lambda out: out.__setitem__(i, out[i].replace(old, new, 1))

    def many(*fns):
        return lambda out: [f(out) for f in fns]

    s0, s1 = steps[30], steps[31]
    v = {
        "midnight": edit(lambda out: [out.__setitem__(i, out[i].replace("2020-09-24", "2020-09-25"))
                                      for i in steps[len(steps) // 2:]]),
        "date_one_digit": edit(at(mid, "2020-09-24", "2020-9-24")),
        "invalid_date": edit(at(mid, "2020-09-24", "2020-02-30")),
        "year_zero": text.replace("2020-09-24", "0000-09-24"),
        "leap_day": text.replace("2020-09-24", "2020-02-29"),
        "not_leap": text.replace("2020-09-24", "1900-02-29"),
        "hour_99": edit(at(mid, " 03:", " 99:")),
        "repeated_step": edit(lambda out: out.insert(s1, out[s0].replace(":18.", ":18.") + " ")),
        "backward_step": edit(at(s1, "Training Iteration: 32 ", "Training Iteration: 3 ")),
        "repeat_then_same_ts": edit(lambda out: out.insert(s1, out[s0])),
        "no_loss": edit(at(mid, "average_loss : ", "avg_loss : ")),
        "empty_loss": edit(lambda out: out.__setitem__(mid, out[mid].split("average_loss")[0] + "average_loss : ")),
        "nan_loss": edit(at(mid, "average_loss : ", "average_loss : nan ")),
        "inf_loss": edit(at(mid, "average_loss : ", "average_loss : inf ")),
        "huge_loss": edit(at(mid, "average_loss : ", "average_loss : 1e400 ")),
        "overflowing_sum": edit(many(at(steps[3], "average_loss : ", "average_loss : 1e308 "),
                                     at(steps[4], "average_loss : ", "average_loss : 1e308 "))),
        "plus_loss": edit(at(mid, "average_loss : ", "average_loss : +1.5 ")),
        "underscore_loss": edit(at(mid, "average_loss : ", "average_loss : 1_0 ")),
        "minus_zero": edit(at(mid, "average_loss : ", "average_loss : -0 ")),
        "dot_loss": edit(at(mid, "average_loss : ", "average_loss : 7. ")),
        "leading_dot": edit(at(mid, "average_loss : ", "average_loss : .5 ")),
        "exp_loss": edit(at(mid, "average_loss : ", "average_loss : 1.25e-3 ")),
        "long_digits": edit(at(mid, "average_loss : ", "average_loss : 7.86331701278686512345678901234 ")),
        "very_long_loss": edit(at(mid, "average_loss : ", "average_loss : " + "1" * 80 + ".5 ")),
        "sixteen_digits": edit(at(mid, "average_loss : ", "average_loss : 9.007199254740993 ")),
        "fs_in_loss": edit(at(mid, "average_loss : ", "average_loss : 7.5\x1c9 ")),
        "tab_before_loss": edit(at(mid, "  average_loss", "\taverage_loss")),
        "final_loss_first": edit(at(mid, "average_loss", "final_loss")),
        "word_after_step": edit(at(mid, "Training Iteration: 75 ", "Training Iteration: 75x ")),
        "huge_step": edit(at(steps[-1], "Training Iteration: 150", "Training Iteration: 1500000000000000000000")),
        "eighteen_digit_step": edit(at(steps[-1], "Training Iteration: 150", "Training Iteration: 999999999999999999")),
        "seven_decimals": edit(at(mid, ".", ".1234567", )),
        "no_fraction": edit(lambda out: out.__setitem__(mid, out[mid][:23] + out[mid][30:])),
        "one_digit_second": edit(lambda out: out.__setitem__(mid, out[mid][:21] + out[mid][22:])),
        "three_digit_second": edit(lambda out: out.__setitem__(mid, out[mid][:21] + "1" + out[mid][21:])),
        "dot_no_digit": edit(lambda out: out.__setitem__(mid, out[mid][:24] + " - " + out[mid].split(" - ", 1)[1])),
        "truncated": edit(lambda out: out.__setitem__(mid, out[mid][:60])),
        "truncated_in_loss": edit(lambda out: out.__setitem__(mid, out[mid].split("average_loss")[0] + "average_lo")),
        "glued_after_bar": edit(lambda out: out.__setitem__(mid, "Iteration:  5%|\u2588  | 3/60\r" + out[mid])),
        "two_on_a_line": edit(lambda out: out.__setitem__(s0, out[s0] + out[s1]) or out.__setitem__(s1, "")),
        "non_ascii": edit(at(mid, "learning_rate", "learning_rate \u00e9")),
        "non_ascii_elsewhere": text.replace("Selected optimization", "S\u00e9lected optimization"),
        "nul": edit(at(mid, "average_loss", "aver\x00age_loss")),
        "cr": text.replace("\n", "\r\n"),
        "lone_cr": text.replace("\n", "\r"),
        "cr_nul_lf": text.replace("\n", "\r\x00\n"),
        "skipped_steps": edit(at(mid, "learning_rate", "skipped_steps : 1  learning_rate")),
        "second_banner": text + "\n".join(ln for ln in lines if "PARAMETER" in ln) + "\n",
        "crash": edit(lambda out: out.insert(mid, "RuntimeError: CUDA error: an illegal memory access was "
                                                  "encountered")),
        "crash_in_step_line": edit(at(mid, "learning_rate", "Traceback exit CUDA error")),
        "cud_across_step": edit(lambda out: out.__setitem__(mid, "CU" + out[mid])),
        "torchrun": "torchrun --nproc_per_node=4 run.py\n" + text,
        "launcher_in_step_line": edit(at(mid, "learning_rate", "torch.distributed.launch --nproc_per_node=3")),
        "dll_inside_loss": edit(at(mid, "average_loss : ", "average_loss : DLL ")),
        "epoch_without_dll": edit(lambda out: out.insert(mid, "Training Epoch: 0 Training Iteration: 5")),
        "only_bars": "Iteration:   0%|          | 0/1646 [00:00<?, ?it/s]\r" * 300,
        "empty": "",
    }
    return v


VARIANTS = _variants()


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("piece", [1 << 20, 1000, 61])
def test_variants_same_parsed_log(monkeypatch, name, piece):
    text = VARIANTS[name]
    for data in (text, text.encode("utf-8")):
        fast, slow = both(monkeypatch, data, piece)
        assert fast == slow, name


def test_variants_do_take_both_paths(monkeypatch):
    """The variants exercise the C path and the fallback (else the parity above proves little)."""
    calls = {"fast": 0, "slow": 0}
    real = pb.PytorchBertStream._scan_fast
    real_split = pb._DLL_FAST

    class Spy:
        def split(self, block):
            calls["slow"] += 1
            return real_split.split(block)

        def __getattr__(self, name):
            return getattr(real_split, name)

    def spy(self, *args):
        calls["fast"] += 1
        return real(self, *args)

    monkeypatch.setattr(pb.PytorchBertStream, "_scan_fast", spy)
    monkeypatch.setattr(pb, "_DLL_FAST", Spy())
    for name in ("midnight", "repeated_step", "nan_loss", "non_ascii", "huge_step", "skipped_steps"):
        before = calls["slow"]
        parse(VARIANTS[name].encode())
        assert calls["slow"] > before, name
    parse(VARIANTS["leap_day"].encode())
    assert calls["fast"] >= 1


def test_extract_result_same(monkeypatch, tmp_path):
    from dlperf_tasks.catalog.loader import load_suite
    from dlperf_tasks.core.model import Window
    from dlperf_tasks.measure.extract import extract_tree
    from dlperf_tasks.report.result_json import extract_result

    tree = DATA / "fixture_logs/pytorch_bert/fp16_ngc_bert_b96"
    suite = load_suite("pytorch-bert")

    def run() -> str:
        doc = extract_result(extract_tree(suite, tree, window=Window(20, 100, "timestamps")))
        doc.get("run", {}).pop("extracted_at", None)
        return json.dumps(doc, sort_keys=True, default=repr)

    fast = run()
    with monkeypatch.context() as m:
        python_path(m)
        slow = run()
    assert "463.11" in fast and "5431.78" in fast  # the README's DLPerf speeds
    assert fast == slow
