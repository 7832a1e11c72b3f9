"""One number format where people read results: report.md's per-trial, dispersion
and invalid-trial tables and ``make run``'s table show 2 decimals and the CV as a percentage
(the review saw ``127.9`` beside ``15.68`` and a CV of ``0.8334`` under a "CV > 5%" label). The
seed tables keep the seeds' format byte for byte (tests/unit/test_report.py)."""

from __future__ import annotations

import copy
import re

from dlperf_tasks.engine.outputs import result_table
from dlperf_tasks.report.markdown import render_markdown
from dlperf_tasks.report.numbers import num2, pct
from tests.fixtures import synth


def _section(md: str, heading: str) -> str:
    return md.split(heading, 1)[1].split("\n## ", 1)[0]


def _result():
    res = copy.deepcopy(synth.nightly_results(1)[0])
    c = res["cells"][0]
    c["cv"] = 0.8334
    c["trials"][0]["value"] = 127.9  # as round2 stores it
    c["trials"][1].update(valid=False, status="INVALID_LOG", value=15.6, reason="truncated")
    return res, c


def test_formatters():
    assert (num2(127.9), num2(15.678), num2(None), num2("NaN")) == ("127.90", "15.68", "-", "NaN")
    assert (pct(0.8334), pct(0.05), pct(None)) == ("83.34%", "5.00%", "-")


def test_report_tables_use_two_decimals_and_cv_in_percent():
    res, cell = _result()
    md = render_markdown(res)
    trials = _section(md, "## Per-trial speeds")
    assert "| 127.90 " in trials and "| 127.9 " not in trials
    assert "15.60 (INVALID_LOG)" in trials
    disp = _section(md, "## Dispersion (full)")
    assert "83.34%" in disp and "0.8334" not in disp and "cv %" in disp
    # every decimal number in these tables has exactly 2 decimals
    for text in (trials, disp, _section(md, "## Invalid trials")):
        body = "\n".join(x for x in text.splitlines() if x.startswith("|"))
        assert not re.findall(r"(?<![\d.])\d+\.(?:\d|\d{3,})(?![\d])", body), body


def test_make_run_table_two_decimals():
    res, _ = _result()
    res["cells"][0]["median_speed"] = 127.9
    summaries = [{"cells": res["cells"]}]
    table = result_table(summaries)
    assert "127.90 samples/s" in table
    assert not re.findall(r"(?<![\d.])\d+\.(?:\d|\d{3,})(?![\d])", table.replace(".00/", "")), table
