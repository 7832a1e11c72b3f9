"""The streamed result JSON (report/result_stream.py) is byte for byte the document result_json
wrote before, and ``dlperf extract`` holds no trial's samples once it is gated."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.measure.extract import extract_tree
from dlperf_tasks.core.model import Sample, Samples, Window
from dlperf_tasks.report.result_json import dumps, validate
from dlperf_tasks.report.result_stream import SampleSpool, samples_json, write_document, write_result_file
from dlperf_tasks.report.result_json import extract_result

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_extract_for_test", ROOT / "bench" / "bench_extract.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return mod


def _tree(tmp_path: Path) -> Path:
    """One round of the bench's MXNet BERT trees (4n8g, 1n8g, 1n1g), a rank-tagged 1n1g trial
    (samples with ranks) and a truncated 4n8g trial (invalid, keeps its samples)."""
    b = _bench()
    b.generate(tmp_path, "mxnet_bert", 1)
    d = tmp_path / "mxnet_bert" / "bz32"
    src = (d / "1n1g" / "bert_b32_fp32_1.log").read_text()
    (d / "1n1g" / "bert_b32_fp32_2.log").write_text("".join("[1,0]<stdout>:" + ln for ln in src.splitlines(True)))
    big = (d / "4n8g" / "bert_b32_fp32_1.log").read_bytes()
    (d / "4n8g" / "bert_b32_fp32_2.log").write_bytes(big[: len(big) * 2 // 3])
    return d


def _old_and_new(d: Path, suite_id: str = "mxnet-bert", window=None) -> tuple[str, str, object]:
    suite = load_suite(suite_id)
    old = dumps(extract_result(extract_tree(suite, d, window=window)))
    with SampleSpool() as spool:
        res = extract_tree(suite, d, window=window, keep_samples=False, sample_sink=spool.put)
        assert all(len(t.samples) == 0 for t in res.trials)  # nothing held after gating
        import io

        buf = io.BytesIO()
        write_document(extract_result(res), spool, buf)
    return old, buf.getvalue().decode(), res


def test_streamed_document_is_the_old_document_on_a_bench_tree(tmp_path):
    old, new, res = _old_and_new(_tree(tmp_path))
    assert {t.status.name for t in res.trials} >= {"OK"} and any(not t.valid for t in res.trials)
    assert any(c for c in json.loads(old)["cells"] for t in c["trials"] if t["samples"] and len(t["samples"][0]) == 3)
    assert new == old
    validate(json.loads(new))


def test_streamed_document_is_the_old_document_pytorch(tmp_path):
    _bench().generate(tmp_path, "pytorch_bert", 1)
    old, new, _ = _old_and_new(tmp_path / "pytorch_bert" / "pytorch", "pytorch-bert", Window(20, 100))
    assert new == old


def test_samples_json_rows_match_result_json_for_odd_values():
    from dlperf_tasks.report.result_stream import json_number as _num

    cases = [
        [Sample(1, 2.5, "ms/iter"), Sample(2, 3, "ms/iter")],                       # an int value: 3.0
        [Sample(1, 2.5, "ms/iter", rank=0), Sample(1, 2.0, "ms/iter", rank=1)],    # ranks
        [Sample(1, 2.5, "ms/iter", rank=0), Sample(2, 2.0, "ms/iter")],            # mixed ranks
        [Sample(1, math.nan, "s"), Sample(2, math.inf, "s"), Sample(3, -math.inf, "s")],
        [Sample(1, 1e308, "s"), Sample(2, 1e308, "s")],                            # the sum overflows
        [],
    ]
    for rows in cases:
        want = json.dumps([[s.iteration, _num(s.value)] + ([s.rank] if s.rank is not None else []) for s in rows],
                          separators=(",", ":"), allow_nan=False)
        assert samples_json(Samples(rows)) == want


def test_cli_output_file_and_json_stdout_are_the_old_document(tmp_path, capsys):
    from dlperf_tasks.cli import main

    d = _tree(tmp_path)
    old = dumps(extract_result(extract_tree(load_suite("mxnet-bert"), d)))
    out = tmp_path / "r" / "result.json"
    assert main(["extract", "--suite", "mxnet-bert", "--log-dir", str(d), "--format", "json", "--quiet",
                 "--output", str(out)]) == 0
    assert out.read_text() == old
    assert capsys.readouterr().out == old
    assert main(["extract", "--suite", "mxnet-bert", "--log-dir", str(d), "--format", "json", "--quiet"]) == 0
    assert capsys.readouterr().out == old
    assert not [p for p in out.parent.iterdir() if p.name != "result.json"]  # no spool or temp file left


def test_write_result_file_refuses_placeholders_without_spool(tmp_path):
    import pytest

    with SampleSpool() as spool:
        token = spool.put(Samples([Sample(1, 2.0, "ms/iter")]))
    with pytest.raises(ValueError, match="no spool"):
        write_result_file({"x": token}, None, tmp_path / "r.json")
    assert not list(tmp_path.iterdir())


def test_dlperf_text_without_sample_rows_is_the_whole_documents(tmp_path):
    """``--format dlperf`` builds the document without sample rows (``keep_samples=False``, no
    spool): its text must be the whole document's, on every fixture tree (throughput, latency,
    invalid trials) and the bench tree (a truncated trial)."""
    from dlperf_tasks.report.markdown import dlperf_text_lines

    fix = ROOT / "tests" / "data" / "fixture_logs"
    cases = [("mxnet-bert", fix / "mxnet_bert"), ("pytorch-bert", fix / "pytorch_bert"),
             ("tensorflow-bert", fix / "tensorflow_bert"), ("mxnet-resnet50", fix / "mxnet_resnet50"),
             ("megatron-gpt", fix / "megatron_gpt"), ("mxnet-bert", _tree(tmp_path))]
    seen_invalid = False
    for suite_id, d in cases:
        whole = list(dlperf_text_lines(extract_result(extract_tree(load_suite(suite_id), d))))
        lean = extract_result(extract_tree(load_suite(suite_id), d, keep_samples=False))
        assert all(t["samples"] == [] for c in lean["cells"] for t in c["trials"])
        assert whole and list(dlperf_text_lines(lean)) == whole, suite_id
        seen_invalid |= any(line.startswith("# invalid") for line in whole)
    assert seen_invalid  # the invalid-trial lines are compared too
