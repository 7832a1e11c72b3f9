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


RID = "bench-20260102T030405-abc123"


def _keys(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}


def test_replace_leaves_only_the_new_run_in_any_suite(tmp_path):
    """The replaced run stood in another suite and had a recorded verdict: its objects, its
    annotation, its index row (and the verdict on it) are all gone; the new run is whole."""
    store = _store(tmp_path)
    first = make_run_dir(tmp_path / "one", run_id=RID, suite="pytorch-bert", started_at="2026-01-02T03:04:05+00:00")
    store.publish(first)
    store.annotate_run(RID, "regressions", {"verdict": "REGRESSION"}, index_value=["slower"])
    assert store.list_runs("pytorch-bert")[0]["regressions"] == ["slower"]
    second = make_run_dir(tmp_path / "two", run_id=RID, suite="mxnet-bert", started_at="2026-01-05T03:04:05+00:00")
    res = store.publish(second, replace=True)
    assert res.replaced and res.replaced_left == []
    assert store.list_runs("pytorch-bert") == []
    (row,) = store.list_runs("mxnet-bert")
    assert "regressions" not in row and row["started_at"] == "2026-01-05T03:04:05+00:00"
    keys = _keys(tmp_path / "store")
    assert not [k for k in keys if "pytorch-bert/" in k and k.startswith("runs/")], keys
    assert store.read_annotation(RID, "regressions") is None


def test_replace_at_the_same_path_drops_the_old_runs_extra_objects_and_verdicts(tmp_path, capsys):
    from dlperf_tasks.cli import main as cli_main

    store = _store(tmp_path)
    first = make_run_dir(tmp_path / "one", run_id=RID, started_at="2026-01-02T03:04:05+00:00")
    (first / "logs" / "gpu-node-a" / "only_in_the_old_run.log").write_text("step 1\n")
    store.publish(first)
    store.annotate_run(RID, "regressions", {"verdict": "REGRESSION"}, index_value=["slower"])
    second = make_run_dir(tmp_path / "two", run_id=RID, started_at="2026-01-02T09:00:00+00:00")
    assert cli_main(["publish", str(second), "--store", f"file://{tmp_path / 'store'}", "--replace"]) == 0
    assert "its objects, verdicts and index row are gone" in capsys.readouterr().err
    keys = _keys(tmp_path / "store")
    assert not [k for k in keys if "only_in_the_old_run" in k or "annotations/" in k], keys
    (row,) = store.list_runs("mxnet-bert")
    assert "regressions" not in row and row["started_at"] == "2026-01-02T09:00:00+00:00"
