"""The streaming index reader (store/index_stream.py) gives exactly what
``json.loads`` gives, however the bytes are cut into pages, and refuses bad documents in one line."""

import json

import pytest

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store.index_stream import iter_index_runs

DOC = {"runs": [{"run_id": "r1", "n": 12345, "x": -1.5e-3, "ok": True, "none": None, "s": "é\u2603 \"q\" ,]}"},
                {"run_id": "r2", "cells": {"a": [1, 2, {"b": False}]}}, {}],
       "schema_version": 1, "suite": "mxnet-bert"}


def _pages(data: bytes, size: int):
    return (data[i:i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("indent", [None, 1])
def test_runs_match_json_loads_for_any_page_size(size, indent):
    data = json.dumps(DOC, indent=indent, sort_keys=True, ensure_ascii=False).encode()
    assert list(iter_index_runs(_pages(data, size), "idx")) == DOC["runs"]


@pytest.mark.parametrize("data, words", [
    (b"[]", "expected {"), (b'{"suite": "x"}', "no 'runs' list"), (b'{"runs": [1]}', "entry 0 is not an object"),
    (b'{"runs": [{"a": 1}', "not valid JSON"), (b'{"runs": []} x', "data after"), (b"\xff\xfe", "UTF-8"),
])
def test_bad_index_documents_are_one_line_errors(data, words):
    with pytest.raises(StoreError, match=words) as ei:
        list(iter_index_runs(_pages(data, 3), "idx"))
    assert "\n" not in str(ei.value)


def test_an_entry_above_the_bound_is_refused():
    data = json.dumps({"runs": [{"x": "y" * 5000}]}).encode()
    with pytest.raises(StoreError, match="longer than 1000 characters"):
        list(iter_index_runs(_pages(data, 100), "idx", max_entry=1000))
