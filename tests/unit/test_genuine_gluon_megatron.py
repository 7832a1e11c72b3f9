"""Genuine public logs of the gluon-cv classification and Megatron-LM families
(``tests/data/genuine_logs/<family>/``, provenance in each family's README). Each gives the right
figure (the README says how it was computed) or a refusal naming what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf_tasks.frameworks import get
from dlperf_tasks.core.model import Cell, Trial, TrialStatus, Window
from dlperf_tasks.core.topology import Topology
from dlperf_tasks.measure.validity import gate

ROOT = Path(__file__).resolve().parents[1] / "data" / "genuine_logs"
FAMILIES = {"gluon_cv": "mxnet_resnet50", "megatron": "megatron_gpt"}


def _cases():
    for family, fw in FAMILIES.items():
        for case in json.loads((ROOT / family / "cases.json").read_text()):
            yield pytest.param(family, fw, case, id=f"{family}/{case['file']}")


def _result(family: str, fw: str, case: dict):
    window = Window(*case["window"])
    cell = Cell(suite=fw, framework=fw, model="m", precision="fp32", batch_size_per_device=case["batch"],
                topology=Topology.parse(case["topology"]), window=window)
    f = get(fw)
    with open(ROOT / family / case["file"], encoding="utf-8") as fh:
        parsed = f.parse(fh)
    return gate(f, Trial(cell, 1), parsed, window)


@pytest.mark.parametrize("family,fw,case", list(_cases()))
def test_genuine_log(family, fw, case):
    r = _result(family, fw, case)
    if "expect" in case:
        assert r.status == TrialStatus.OK, r.reason
        assert r.metric.value == case["expect"]
        if "throughput" in case:
            assert r.metric.throughput == case["throughput"]
        if "memory_mib" in case:
            assert r.metric.memory_mib == case["memory_mib"]
    else:
        assert r.status == TrialStatus.INVALID_LOG
        assert case["refuse"] in r.reason, r.reason


def test_every_corpus_file_has_a_case_and_a_readme_row():
    for family in FAMILIES:
        d = ROOT / family
        named = {c["file"] for c in json.loads((d / "cases.json").read_text())}
        assert named == {p.name for p in d.glob("*.log")}
        readme = (d / "README.md").read_text()
        assert all(f"`{name}`" in readme for name in named)
    index = (ROOT / "README.md").read_text()
    assert all(f"`{family}/`" in index for family in FAMILIES)
