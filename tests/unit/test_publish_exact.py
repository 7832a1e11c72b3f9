"""Publish is exact and linear: a log that keeps growing while publish reads it is published as it
was when publish reached it (a writer never keeps publish running), and the spool's state file is
a checkpoint, not rewritten after every object (publish costs the same per file at 8,000 small
logs as at 1,000)."""

from __future__ import annotations

from pathlib import Path

from dlperf_tasks.store import RetryPolicy, Store
from dlperf_tasks.store import spool as spool_mod
from dlperf_tasks.store.redact import Redactor
from tests.fixtures.s3 import make_run_dir

FAST = RetryPolicy(attempts=1, base_delay=0.01, max_delay=0.02)


def _store(tmp_path: Path) -> Store:
    return Store.from_url(f"file://{tmp_path / 'store'}", retry=FAST)


def test_a_growing_log_is_read_up_to_its_size_when_publish_reached_it(tmp_path, monkeypatch):
    rd = make_run_dir(tmp_path / "work", log_lines=2)
    log = rd / "logs" / "gpu-node-a" / "bert_b32_fp32_1.log"
    size = log.stat().st_size
    grown = {"n": 0}
    original = Redactor._block

    def block_and_grow(self, text):  # the trial is still writing while publish redacts its log
        if grown["n"] < 5 and "host gpu-node-a (10.11.0.2)" in text:  # this log's first block is read
            grown["n"] += 1
            with open(log, "a") as f:
                f.write(("step 999 still training\n" * 3000))
        return original(self, text)

    monkeypatch.setattr(Redactor, "_block", block_and_grow)
    _store(tmp_path).publish(rd)
    assert grown["n"] >= 1 and log.stat().st_size > size
    stored = [p.read_text() for p in (tmp_path / "store").rglob("bert_b32_fp32_1.log")]
    assert len(stored) == 2 and not any("still training" in t for t in stored)


def test_the_state_file_is_not_rewritten_after_every_object(tmp_path, monkeypatch):
    rd = make_run_dir(tmp_path / "work", log_lines=1)
    for i in range(300):
        p = rd / "logs" / "gpu-node-a" / f"extra_{i:04d}.log"
        p.write_text(f"step {i}\n")
    writes = []
    original = spool_mod.Spool.write_state
    monkeypatch.setattr(spool_mod.Spool, "write_state",
                        lambda self, *a, **k: (writes.append(a), original(self, *a, **k))[1])
    result = _store(tmp_path).publish(rd)
    assert len(result.uploaded) > 300
    assert len(writes) <= 3, len(writes)  # a checkpoint every few seconds and the final state
    assert writes[-1][0] is True
