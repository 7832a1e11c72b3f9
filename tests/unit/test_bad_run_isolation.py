"""One bad run never takes the others down: publish refuses, in one line and before anything is
uploaded, a result holding a value the store's readers cannot read back (an integer beyond 64
bits, a lone surrogate, 1e400, a string where a mapping is expected, deep nesting); an index that
already holds such a row (written before the check) still gives every other run, with a warning,
and takes further publishes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from dlperf_tasks.cli import main as cli_main
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import RetryPolicy, Store
from tests.fixtures.s3 import make_run_dir

FAST = RetryPolicy(attempts=1, base_delay=0.01, max_delay=0.02)


def _store(tmp_path: Path) -> Store:
    return Store.from_url(f"file://{tmp_path / 'store'}", retry=FAST)


def _with(rd: Path, edit) -> Path:
    text = (rd / "result.json").read_text()
    (rd / "result.json").write_text(edit(text))
    return rd


HOSTILE = {
    "int beyond 64 bits": lambda t: t.replace('"n_valid": 2', '"n_valid": 123456789012345678901234567890'),
    "lone surrogate": lambda t: t.replace('"model": "bert-base"', '"model": "bert\\ud800base"'),
    "1e400": lambda t: t.replace('"speedup": 7.3', '"speedup": 1e400'),
    "NaN literal": lambda t: t.replace('"speedup": 7.3', '"speedup": NaN'),
    "string for the cells": lambda t: json.dumps({**json.loads(t), "cells": "oops"}),
    "string for a cell": lambda t: json.dumps({**json.loads(t), "cells": ["oops"]}),
    "string for the cluster": lambda t: t.replace('"cluster": {', '"cluster": "x", "was": {'),
    "string for a speed": lambda t: t.replace('"median_speed": 928.03', '"median_speed": "fast"'),
    "deep nesting": lambda t: t.replace('"dlperf": {}', '"dlperf": ' + "[" * 5000 + "]" * 5000),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_publish_refuses_a_value_no_reader_can_read_back_in_one_line(tmp_path, capsys, case):
    rd = _with(make_run_dir(tmp_path / "work", log_lines=2), HOSTILE[case])
    with pytest.raises(StoreError) as exc:
        _store(tmp_path).publish(rd)
    assert "\n" not in str(exc.value) and "refusing to publish" in str(exc.value), str(exc.value)
    assert not (tmp_path / "store" / "runs").exists()
    code = cli_main(["publish", str(rd), "--store", f"file://{tmp_path / 'store'}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err


@pytest.mark.parametrize("bad", ['123456789012345678901234567890', '"x\\udc80y"', '1e400', '"a"'])
def test_an_index_row_no_reader_can_read_is_skipped_with_a_warning(tmp_path, caplog, bad):
    store = _store(tmp_path)
    store.publish(make_run_dir(tmp_path / "w1", run_id="mxnet-bert-20260102T030405-aaaaaa"))
    store.publish(make_run_dir(tmp_path / "w2", run_id="mxnet-bert-20260103T030405-bbbbbb",
                               started_at="2026-01-03T03:04:05+00:00"))
    index = next((tmp_path / "store").rglob("index/mxnet-bert.json"))
    doc = json.loads(index.read_text())
    row = json.loads(json.dumps(doc["runs"][0]))
    row["run_id"] = "mxnet-bert-20260102T000000-cccccc"
    text = json.dumps({**doc, "runs": [doc["runs"][0], "@@BAD@@", doc["runs"][1]]})
    marker = json.dumps({**row, "cells": {"c": {"median_speed": "@@V@@"}}}).replace('"@@V@@"', bad)
    index.write_text(text.replace('"@@BAD@@"', marker))
    with caplog.at_level(logging.WARNING):
        ids = [r["run_id"] for r in store.list_runs("mxnet-bert")]
    assert ids == ["mxnet-bert-20260102T030405-aaaaaa", "mxnet-bert-20260103T030405-bbbbbb"]
    assert "index row 1 (run 'mxnet-bert-20260102T000000-cccccc') skipped" in caplog.text
    # a further publish into the suite still works and the index reads cleanly afterwards
    store.publish(make_run_dir(tmp_path / "w3", run_id="mxnet-bert-20260104T030405-dddddd",
                               started_at="2026-01-04T03:04:05+00:00"))
    assert len(store.list_runs("mxnet-bert")) == 3
