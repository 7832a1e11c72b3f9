"""Node health (dlperf_tasks/policy/nodehealth.py): suspects from per-node speeds, stragglers,
errors and telemetry; the work-dir quarantine state."""

from __future__ import annotations

import json

import pytest

from dlperf_tasks.policy import nodehealth as NH
from dlperf_tasks.store.quarantine import STATE_FILE, Quarantine
def _result(per_trial, nodes=("node1", "node2", "node3", "node4"), cell="s/bz32/fp32/1n1g", metric="throughput"):
    trials = [{"index": i + 1, "trial_id": f"{cell}/t{i + 1}", "status": st, "value": v, "node_names": [n],
               "exit_codes": {n: 0 if st == "OK" else 1}, "reason": "" if st == "OK" else "crash"}
              for i, (n, v, st) in enumerate(per_trial)]
    return {"run": {"cluster": {"nodes": [{"name": n} for n in nodes]}},
            "cells": [{"cell_id": cell, "metric_kind": metric, "trials": trials}]}


def test_slow_node_in_several_trials_is_suspect_with_evidence():
    rows = [(n, 100.0 + 0.2 * (i % 3), "OK") for i, n in enumerate(["node1", "node2", "node4"] * 3)]
    rows += [("node3", 80.0, "OK"), ("node3", 81.0, "OK"), ("node3", 79.5, "OK")]
    vs = NH.assess_run(_result(rows))
    assert [v.node for v in vs if v.suspect] == ["node3"]
    v3 = vs[0]
    assert v3.slow_trials == 3 and v3.median_slowdown == pytest.approx(0.2, abs=0.01)
    assert "slower than its peers" in v3.evidence[0] and "80.00 vs" in v3.evidence[0]


def test_one_slow_trial_or_shared_noise_names_nobody():
    rows = [(n, 100.0 + (i * 7 % 5) * 0.8, "OK") for i, n in enumerate(["node1", "node2", "node3", "node4"] * 3)]
    rows.append(("node2", 85.0, "OK"))  # a single bad trial
    assert not any(v.suspect for v in NH.assess_run(_result(rows)))


def test_latency_cells_slow_means_higher():
    rows = [(n, 200.0, "OK") for n in ["node1", "node2"] * 2] + [("node3", 260.0, "OK")] * 2
    vs = NH.assess_run(_result(rows, metric="latency"))
    assert [v.node for v in vs if v.suspect] == ["node3"]


def test_errors_xid_and_stragglers():
    rows = [("node1", 100.0, "OK"), ("node2", None, "CRASH"), ("node2", None, "CRASH"), ("node3", 100.0, "OK")]
    strag = [{"trial_id": f"s/2n8g/t{i}", "slowdown": {"node1": 0.0, "node4": 0.6}} for i in range(2)]
    vs = {v.node: v for v in NH.assess_run(_result(rows), strag, telemetry={"node1": {"xid": [79]}})}
    assert vs["node2"].suspect and vs["node2"].error_trials == 2 and "failed 2 trial(s)" in vs["node2"].evidence[0]
    assert vs["node4"].suspect and vs["node4"].slow_trials == 2
    assert vs["node1"].suspect and "XID" in vs["node1"].evidence[0]
    assert not vs["node3"].suspect
    doc = NH.to_doc(list(vs.values()), quarantined=["node4"])
    md = NH.render_markdown(doc)
    assert "**node4** suspect (quarantined)" in md and "**node3**" not in md


def test_quarantine_state_persists_and_clears(tmp_path):
    q = Quarantine(tmp_path / "work")
    assert q.nodes() == {}
    q.add("node3", ["slower by 20 %"], run_id="r1")
    again = Quarantine(tmp_path / "work")  # another process: same file
    assert again.nodes()["node3"]["evidence"] == ["slower by 20 %"] and again.nodes()["node3"]["run_id"] == "r1"
    assert again.clear("node3") is True and again.clear("node3") is False
    assert json.loads((tmp_path / "work" / STATE_FILE).read_text())["nodes"] == {}
    (tmp_path / "work" / STATE_FILE).write_text("[1]")
    with pytest.raises(ValueError, match="malformed"):
        q.nodes()


def test_config_values():
    assert NH.HealthConfig.from_value(True).quarantine is True
    assert NH.HealthConfig.from_value({"threshold": 0.1}).threshold == 0.1
    with pytest.raises(ValueError, match="unknown"):
        NH.HealthConfig.from_value({"treshold": 0.1})


def test_cli_quarantine_list_and_clear(tmp_path, capsys):
    from dlperf_tasks.cli import main

    Quarantine(tmp_path).add("node3", ["slower than its peers by 20 %"], run_id="r1")
    assert main(["cluster", "quarantine", "--work-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "node3: since" in out and "slower than its peers by 20 %" in out
    assert main(["cluster", "clear", "node3", "--work-dir", str(tmp_path)]) == 0
    assert Quarantine(tmp_path).nodes() == {}
    assert main(["cluster", "clear", "node3", "--work-dir", str(tmp_path)]) == 2
    assert "node node3 is not quarantined" in capsys.readouterr().err


def test_telemetry_flags_become_evidence():
    res = _result([("node1", 100.0, "OK"), ("node2", 100.0, "OK")])
    res["cells"][0]["trials"][1]["telemetry"] = {"flags": [{"kind": "xid", "node": "node2", "detail": "Xid 79"},
                                                          {"kind": "throttled", "node": "node1", "detail": "hw"}]}
    facts = NH.telemetry_facts(res)
    assert facts == {"node2": {"xid": ["Xid 79"], "throttle": 0}, "node1": {"xid": [], "throttle": 1}}
    vs = {v.node: v for v in NH.assess_run(res, telemetry=facts)}
    assert vs["node2"].suspect and "XID" in vs["node2"].evidence[0]
    assert not vs["node1"].suspect and "throttling" in vs["node1"].evidence[0]  # throttled but not slow
