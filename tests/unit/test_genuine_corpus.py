"""Every genuine public log of the corpus gives the upstream tool's own figure (or the one the
seed's rule gives by hand), or a refusal naming what is missing: never a silent wrong number.

Each entry of tests/data/genuine_logs/corpus.json names its source (repo@commit:path or an issue URL); the
log is laid out alone in DLPerf's tree and read by ``extract_tree`` with the suite's defaults."""

from __future__ import annotations

import json

import pytest

from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.measure.extract import extract_tree
from tests.unit.genuine_corpus import ROOT, entries, lay_out

ENTRIES = entries()


def test_the_corpus_is_large_and_has_provenance():
    """corpus.json (read here) plus the per-family cases.json files (test_genuine_gluon_megatron.py)."""
    family_cases = sum(len(json.loads(p.read_text())) for p in ROOT.glob("*/cases.json"))
    assert len(ENTRIES) + family_cases >= 30
    for e in ENTRIES:
        assert e["source"] and ("@" in e["source"] or e["source"].startswith("https://")), e
        assert e["figure"], e


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_genuine_log(tmp_path, entry):
    lay_out(entry, tmp_path)
    (trial,) = extract_tree(load_suite(entry["suite"]), tmp_path).trials
    want = entry["expect"]
    if isinstance(want, str):  # "refuse: <words the reason must hold>"
        assert not trial.valid, (trial.metric, trial.reason)
        assert want.removeprefix("refuse: ") in trial.reason
    else:
        assert trial.valid, trial.reason
        assert round(trial.metric.value, 2) == want
