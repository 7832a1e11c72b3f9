"""A/B confirmation (dlperf_tasks/history/confirm.py) on a seeded local store: a planted image
regression is confirmed, a planted noise spike is not reproduced; the verdict lands in the
run's annotations and only a confirmed finding notifies."""

from __future__ import annotations

import random

import pytest

from dlperf_tasks.history import check, confirm as C
from tests.fixtures import synth
from dlperf_tasks.store import Store

NEW_DIGEST = "sha256:" + "b2" * 32
CELL = "mxnet-bert/bz32/fp32/1n1g"
SCALE_CELL = "mxnet-bert/bz32/fp32/4n8g"


@pytest.fixture()
def seeded(tmp_path):
    """8 clean nights, then night 8 with a new image 8 % slower on CELL (digest changed) and
    night 9 back on the old image with a noise spike (-8 %) on the 4n8g cell's scaling."""
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    rs = synth.nightly_results(10, plant={8: {CELL: 0.92}, 9: {SCALE_CELL: 0.92}}, digest_changes={8: NEW_DIGEST},
                               trial_noise=0.005)
    ids = synth.seed_store(store, rs, str(tmp_path / "work"))
    return store, ids


def _ab(plan, speed_of, rounds, rng):
    """Interleaved A B A B values from a stand-in whose speed depends on the image."""
    out = {"A": {}, "B": {}}
    for variant, cell, _ in plan.order():
        image = plan.image_a if variant == "A" else plan.image_b
        out[variant].setdefault(cell, []).append(speed_of(cell, image) * rng.gauss(1.0, 0.005))
    return out


def test_planted_image_regression_confirmed_and_recorded(seeded, monkeypatch, tmp_path, capsys):
    capsys_, store_dir = capsys, tmp_path / "store"
    store, ids = seeded
    rep = check.check_run(store, ids[8], log=None, notify_target="")
    assert [f"{v.kind}:{v.cell_id}" for v in rep.findings] == [f"throughput:{CELL}"]
    rows = store.list_runs(suite="mxnet-bert")
    plan = C.plan_confirmation(store.read_annotation(ids[8], "regressions"), 0, rows)
    assert plan.cells == [CELL] and plan.image_b.endswith("@" + NEW_DIGEST)
    assert plan.image_a.endswith("@" + synth.BASE_DIGEST) and plan.run_a == ids[7]
    assert [v for v, _, _ in plan.order()] == ["A", "B"] * 4
    assert C.ConfirmPlan.from_conf(plan.to_conf()) == plan
    slow = {plan.image_b: 0.92}
    vals = _ab(plan, lambda cell, img: 127.0 * slow.get(img, 1.0), plan.rounds, random.Random(1))
    doc = C.judge(plan, vals)
    assert doc["status"] == C.CONFIRMED and doc["effect_pct"] == pytest.approx(-8.0, abs=1.0)
    assert doc["ci_pct"][1] < 0 and doc["ci_confidence"] >= 0.95
    assert doc["env_diff"]["image_digest"] == {"baseline": synth.BASE_DIGEST, "current": NEW_DIGEST}
    sent = []
    monkeypatch.setattr("dlperf_tasks.history.notify.resolve_callable", lambda spec: sent.append)
    assert C.record(store, doc, notify_target="python:x:y") is True
    assert sent and sent[0]["findings"][0]["status"] == C.CONFIRMED
    ann = store.read_annotation(ids[8], C.ANNOTATION)
    assert C.status_of(ann, f"throughput:{CELL}") == C.CONFIRMED
    row = next(r for r in store.list_runs(suite="mxnet-bert") if r["run_id"] == ids[8])
    assert row[C.ANNOTATION] == {f"throughput:{CELL}": C.CONFIRMED}
    from dlperf_tasks.cli import main

    assert main(["results", "show", ids[8], "--store", f"file://{store_dir}"]) == 0
    out = capsys_.readouterr().out
    assert f"{CELL}:" in out and "[confirmed by A/B: -7.97 %" in out


def test_planted_noise_spike_not_reproduced(seeded, monkeypatch):
    store, ids = seeded
    for i in range(5, 9):  # the service checks every run at publish: night 8 (the new image) is flagged
        check.check_run(store, ids[i], log=None, notify_target="")
    rep = check.check_run(store, ids[9], log=None, notify_target="")
    kinds = {f"{v.kind}:{v.cell_id}" for v in rep.findings}
    assert f"scaling:{SCALE_CELL}" in kinds
    plan = C.plan_confirmation(store.read_annotation(ids[9], "regressions"), f"scaling:{SCALE_CELL}",
                               store.list_runs(suite="mxnet-bert"))
    assert plan.cells == [SCALE_CELL, "mxnet-bert/bz32/fp32/1n1g"] and plan.image_a == plan.image_b
    assert plan.run_a == ids[7]  # the previous GOOD run, not the flagged night 8
    speeds = {SCALE_CELL: 3043.0, "mxnet-bert/bz32/fp32/1n1g": 127.0}
    doc = C.judge(plan, _ab(plan, lambda cell, img: speeds[cell], plan.rounds, random.Random(2)))
    assert doc["status"] == C.NOT_REPRODUCED and doc["ci_pct"][0] < 0 < doc["ci_pct"][1]
    assert doc["env_diff"] == {}
    sent = []
    monkeypatch.setattr("dlperf_tasks.history.notify.resolve_callable", lambda spec: sent.append)
    assert C.record(store, doc, notify_target="python:x:y") is False and not sent
    assert C.status_of(store.read_annotation(ids[9], C.ANNOTATION), f"scaling:{SCALE_CELL}") == C.NOT_REPRODUCED


def test_shift_interval_and_small_samples():
    est, lo, hi, cov = C.shift_interval([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0])
    assert est == 1.0 and (lo, hi) == (-2.0, 4.0) and cov == pytest.approx(1 - 2 / 70)
    p = C.ConfirmPlan("s", "r", "throughput:c", "throughput", "c", ["c"], "i@a", "i@b", "r0")
    doc = C.judge(p, {"A": {"c": [1.0]}, "B": {"c": [0.5]}})
    assert doc["status"] == C.NOT_REPRODUCED and "too few" in doc["note"]


def test_notify_mode_and_bad_inputs():
    assert C.notify_only_confirmed("confirmed") and not C.notify_only_confirmed("findings")
    with pytest.raises(ValueError):
        C.notify_only_confirmed("always")
    with pytest.raises(ValueError, match="no finding"):
        C.plan_confirmation({"run_id": "r", "findings": []}, "throughput:x", [])
    with pytest.raises(ValueError, match="rounds"):
        C.ConfirmPlan.from_conf({"confirm": {"suite": "s", "run_id": "r", "finding": "f", "kind": "throughput",
                                             "cell_id": "c", "cells": ["c"], "image_a": "a", "image_b": "b",
                                             "run_a": "r0", "rounds": 1}})
    assert C.image_ref({"image": "reg:5000/x/y:1.0", "image_digest": "sha256:ab"}) == "reg:5000/x/y@sha256:ab"


def test_cli_confirm_plan_only_prints_the_dag_conf(seeded, capsys, tmp_path):
    import json

    from dlperf_tasks.cli import main

    store, ids = seeded
    check.check_run(store, ids[8], log=None, notify_target="")
    url = f"file://{tmp_path / 'store'}"
    assert main(["confirm", ids[8], "--store", url, "--plan-only"]) == 0
    conf = json.loads(capsys.readouterr().out)["confirm"]
    assert conf["cells"] == [CELL] and conf["image_b"].endswith(NEW_DIGEST) and conf["rounds"] == 4
    assert main(["confirm", ids[2], "--store", url, "--plan-only"]) == 2  # never checked: no finding
    assert "has no regression finding" in capsys.readouterr().err


def test_results_page_shows_the_ab_status(seeded):
    from fastapi.testclient import TestClient

    from dlperf_tasks.web.access import Viewer
    from dlperf_tasks.web.app import create_app

    store, ids = seeded
    check.check_run(store, ids[8], log=None, notify_target="")
    plan = C.plan_confirmation(store.read_annotation(ids[8], "regressions"), 0, store.list_runs(suite="mxnet-bert"))
    slow = {plan.image_b: 0.92}
    C.record(store, C.judge(plan, _ab(plan, lambda c, img: 127.0 * slow.get(img, 1.0), 4, random.Random(3))),
             notify_target="")
    app = create_app(lambda: store, authorize=lambda: Viewer(name="t", suites=frozenset({"mxnet-bert"}),
                                                             other_suites=False, known=frozenset({"mxnet-bert"})))
    page = TestClient(app).get(f"/runs/{ids[8]}").text
    assert 'class="badge bad ab-status">confirmed by A/B -7.75% [-8.98, -6.99]' in page
    assert "unconfirmed" not in page


def test_notify_on_confirmed_silences_the_regression_check(seeded, monkeypatch):
    store, ids = seeded
    sent = []
    monkeypatch.setattr("dlperf_tasks.history.notify.resolve_callable", lambda spec: sent.append)
    check.check_run(store, ids[8], log=None, notify_target="python:x:y")
    assert len(sent) == 1  # default: every finding is sent
    monkeypatch.setenv(C.NOTIFY_ON_ENV, "confirmed")
    check.check_run(store, ids[8], log=None, notify_target="python:x:y")
    assert len(sent) == 1  # confirmed-only: the check stays silent, record() sends confirmed ones


def test_confirmed_finding_goes_through_send_with_a_confirmation_message(seeded):
    """The DAG path hands record() its notifier fan-out (send): a confirmed finding goes there,
    not to the webhook, with a message that names the finding, both images and the effect."""
    from dlperf_tasks.history.notify import findings_message

    store, ids = seeded
    check.check_run(store, ids[8], log=None, notify_target="")
    plan = C.plan_confirmation(store.read_annotation(ids[8], "regressions"), 0,
                               store.list_runs(suite="mxnet-bert"))
    slow = {plan.image_b: 0.92}
    doc = C.judge(plan, _ab(plan, lambda cell, img: 127.0 * slow.get(img, 1.0), plan.rounds, random.Random(4)))
    got = []
    assert C.record(store, doc, notify_target="http://127.0.0.1:9/never", send=lambda r: got.append(r) or 1)
    assert len(got) == 1 and got[0]["kind"] == "confirmation" and got[0]["run_id"] == ids[8]
    msg = findings_message(got[0], "http://ui/dlperf/runs/x")
    assert msg["kind"] == "confirmation" and f"throughput:{CELL}" in msg["subject"] and ids[8] in msg["subject"]
    assert plan.image_a in msg["text"] and plan.image_b in msg["text"] and "reproduced" in msg["text"]
    assert "env image_digest:" in msg["text"] and msg["text"].endswith("results: http://ui/dlperf/runs/x")
    not_rep = dict(doc, status=C.NOT_REPRODUCED)
    assert C.record(store, not_rep, send=lambda r: got.append(r) or 1) is False and len(got) == 1
