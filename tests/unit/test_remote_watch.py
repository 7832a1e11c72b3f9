"""The watchdog's log streaming (remote/watch.py): the highest iteration of a log fed in arbitrary
pieces (lines split anywhere, multi-byte characters split, ``\\r`` progress bars), each byte parsed
once, the log copied to disk exactly, reads bounded to CHUNK; and bench_watchdog on a tiny size."""

from __future__ import annotations

import codecs
import importlib.util
import json
import sys
from pathlib import Path

from dlperf_tasks import frameworks
from dlperf_tasks.remote import watch

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/data/fixture_logs/pytorch_bert/fp16_ngc_bert_b96/pytorch/2n8g/bert-base-adam-training_b96_fp16_1.log"


def test_progress_over_arbitrary_pieces_equals_the_full_parse():
    fw = frameworks.get("pytorch_bert")
    data = FIX.read_bytes().replace(b"\n", "\n\u00e9tape \r".encode(), 7)  # \r and a 2-byte character
    full = max(fw.parse(data.decode().splitlines(keepends=True)).facts.iterations_seen)
    for size in (1, 7, 100, 4096):
        state = watch.BlockProgress(fw)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for i in range(0, len(data), size):
            state.feed(decoder.decode(data[i:i + size]))
        state.finish()
        assert state.max_iteration == full, size


def test_each_piece_is_parsed_once():
    class Counting:
        def __init__(self):
            self.scanned = 0

        def stream(self):
            outer = self

            class S:
                max_iteration = None

                def feed(self, block):
                    outer.scanned += len(block)
            return S()

    fw = Counting()
    state = watch.BlockProgress(fw)
    text = "line one\n" * 1000
    for i in range(0, len(text), 33):
        state.feed(text[i:i + 33])
    assert fw.scanned == len(text)  # every character once: no re-parse of what came before


def test_node_log_copies_exactly_and_reads_in_bounded_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "CHUNK", 1000)
    src = FIX.read_bytes() + b"tail without newline Training Epoch: 0 Training Iteration: 99999"
    reads = []

    def read(offset: int, n: int) -> bytes:
        reads.append(n)
        return src[offset:offset + n]

    log = watch.NodeLog(tmp_path / "a" / "x.log", watch.BlockProgress(frameworks.get("pytorch_bert")))
    got = log.pull(read, max_chunks=3)
    assert got == 3000 and log.offset == 3000 and max(reads) == 1000
    log.pull(read, max_chunks=0)
    assert log.offset == len(src)
    assert log.tail(20) == src[-20:]
    log.close()
    assert (tmp_path / "a" / "x.log").read_bytes() == src
    assert log.max_iteration == max(frameworks.get("pytorch_bert").parse(
        src.decode().splitlines(keepends=True)).facts.iterations_seen)


def test_bench_watchdog_tiny(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_watchdog_under_test", ROOT / "bench/bench_watchdog.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "w.json"
    assert mod.main(["--sizes-mb", "2,4", "--old", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "peak RSS" in text and "goal" in text
    d = json.loads(out.read_text())
    for r in d["incremental"].values():
        assert r["max_iteration"] == r["last_written"] and r["log_copy_ok"] and r["ms_per_mb"] > 0
    assert d["old"]["1.0"]["polls"] >= 1
