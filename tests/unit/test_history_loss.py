"""Loss sanity in the regression check: on a seeded local store (real publish path),
a run whose final loss is far outside its cell's history band is a finding of kind ``loss``
("fast but wrong?") in the report, the recorded annotation, the index badge, ``dlperf results
show`` and the results page; a normal run gives none; a cell without history is not flagged and
the check says it had no history."""

from __future__ import annotations

import random

import pytest

from dlperf_tasks.history import check
from dlperf_tasks.store import Store
from tests.fixtures import synth

CELL = "mxnet-bert/bz32/fp32/1n1g"
LOSS = {c: 1.60 + 0.05 * i for i, c in enumerate(synth.cell_ids())}  # each cell's usual final loss


def with_losses(result: dict, rng: random.Random, plant: dict[str, float] | None = None,
                only: set[str] | None = None) -> dict:
    """Give every valid trial a final loss (as the parsers put it in ``metric.details``) and each
    cell its ``final_losses`` (as the outputs step does); ``plant``: cell -> loss multiplier."""
    for c in result["cells"]:
        if only is not None and c["cell_id"] not in only:
            continue
        f = (plant or {}).get(c["cell_id"], 1.0)
        losses = []
        for t in c["trials"]:
            x = round(LOSS[c["cell_id"]] * f * rng.gauss(1.0, 0.004), 4)
            t["metric"]["details"] = {"final_loss": x}
            losses.append(x)
        c["final_losses"] = losses
    return result


@pytest.fixture()
def seeded(tmp_path):
    """6 nights with normal losses; night 6: CELL's loss 40 % higher (fast, speeds unchanged);
    night 7: normal. Speeds are clean in every night (no throughput finding)."""
    rng = random.Random(5)
    rs = synth.nightly_results(8, trials=3, trial_noise=0.005)
    for i, r in enumerate(rs):
        with_losses(r, rng, plant={CELL: 1.4} if i == 6 else None)
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, rs, str(tmp_path / "work"))
    return store, ids


def test_final_loss_outside_the_band_is_a_loss_finding(seeded):
    store, ids = seeded
    rep = check.check_run(store, ids[6], log=None, notify_target="")
    (f,) = rep.findings
    assert (f.kind, f.cell_id, f.status) == ("loss", CELL, "fast but wrong?")
    assert f.note.startswith("fast but wrong? final loss") and "outside the band" in f.note
    assert f.n_baseline_runs == 6 and f.band[1] < f.current and f.delta_pct > 30
    assert any(line.startswith(f"  LOSS {CELL}: fast but wrong?") for line in rep.summary_lines())
    doc = store.read_annotation(ids[6], "regressions")
    assert [(x["kind"], x["status"]) for x in doc["findings"]] == [("loss", "fast but wrong?")]
    row = next(r for r in store.list_runs(suite=synth.SUITE) if r["run_id"] == ids[6])
    assert row["regressions"]["cells"] == [f"loss:{CELL}"]
    assert {v["cell_id"] for v in doc["loss"]} == set(synth.cell_ids())  # every cell was loss-checked


def test_normal_run_has_no_loss_finding(seeded):
    store, ids = seeded
    rep = check.check_run(store, ids[7], log=None, notify_target="")  # history holds the planted night too
    assert rep.findings == []
    assert {v.status for v in rep.verdicts if v.kind == "loss"} == {"ok"}


def test_cell_without_history_is_not_flagged_and_says_so(tmp_path):
    rng = random.Random(2)
    rs = synth.nightly_results(5, trials=3, trial_noise=0.005)
    for i, r in enumerate(rs):  # CELL's loss only printed from night 3 on: 1 earlier run, 3 needed
        with_losses(r, rng, plant={CELL: 3.0} if i == 4 else None, only=None if i >= 3 else set(synth.cell_ids()) - {CELL})
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, rs, str(tmp_path / "work"))
    rep = check.check_run(store, ids[4], log=None, notify_target="")
    assert rep.findings == []
    (v,) = [v for v in rep.verdicts if v.kind == "loss" and v.cell_id == CELL]
    assert v.status == "insufficient_history" and v.note.startswith("no loss history for this cell: 1 earlier run(s)")
    assert CELL in rep.to_dict()["insufficient_history"]
    assert any("no loss history" in line and CELL in line for line in rep.summary_lines())
    others = [v for v in rep.verdicts if v.kind == "loss" and v.cell_id != CELL]
    assert others and {v.status for v in others} == {"ok"}


def test_history_of_another_training_length_is_not_a_band(tmp_path):
    """Six nights trained 20 + 100 iterations; a run of 2 + 6 iterations (a quick manual check)
    ends at a much higher loss: no finding, the cell has no loss history of its length. A later
    run of the nightly length is checked against the six nights (not the short run)."""
    rng = random.Random(3)
    rs = synth.nightly_results(8, trials=3, trial_noise=0.005)
    for i, r in enumerate(rs):
        with_losses(r, rng, plant={c: 2.5 for c in synth.cell_ids()} if i == 6 else None)
        r["run"]["window"] = {"warmup": 2, "measure": 6} if i == 6 else {"warmup": 20, "measure": 100}
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, rs, str(tmp_path / "work"))
    short = check.check_run(store, ids[6], log=None, notify_target="")
    assert short.findings == []
    (v,) = [v for v in short.verdicts if v.kind == "loss" and v.cell_id == CELL]
    assert v.status == "insufficient_history" and v.n_baseline_runs == 0
    nightly = check.check_run(store, ids[7], log=None, notify_target="")
    assert nightly.findings == []
    (v,) = [v for v in nightly.verdicts if v.kind == "loss" and v.cell_id == CELL]
    assert v.status == "ok" and v.n_baseline_runs == 6 and ids[6] not in v.baseline_runs


def test_results_show_and_page_carry_the_loss_finding(seeded, capsys):
    from fastapi.testclient import TestClient

    from dlperf_tasks.cli import main
    from dlperf_tasks.web.access import Viewer
    from dlperf_tasks.web.app import create_app

    store, ids = seeded
    check.check_run(store, ids[6], log=None, notify_target="")
    capsys.readouterr()
    assert main(["results", "show", ids[6], "--store", store.url()]) == 0
    out = capsys.readouterr().out
    assert f"  loss       {CELL}: fast but wrong? final loss" in out and "1 regression(s)" in out
    app = create_app(lambda: store, authorize=lambda: Viewer(name="t", suites=frozenset({synth.SUITE}),
                                                             other_suites=False, known=frozenset({synth.SUITE})))
    page = TestClient(app).get(f"/runs/{ids[6]}")
    assert page.status_code == 200
    assert '<span class="loss-note">fast but wrong? final loss' in page.text
