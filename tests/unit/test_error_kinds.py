"""Errors carry kinds, not texts to parse: where the condition is known the error's
class says what happened (core/errors.py), and whoever branches checks the class. The results
page answers 404 for a run that is not there (NotFoundError, InvalidRunIdError) and 502 for any
other store failure, whatever the message says; the plan task's map-length check tells a plan
too large (PlanTooLargeError) from any other planning error."""

from __future__ import annotations

import pytest
from fastapi import Header, HTTPException
from fastapi.testclient import TestClient

from dlperf_tasks.airflow.params import ParamsError, check_map_length
from dlperf_tasks.catalog.loader import load_suite
from dlperf_tasks.catalog.plan import Overrides, plan
from dlperf_tasks.core.errors import InvalidRunIdError, NotFoundError, PlanError, PlanTooLargeError, StoreError
from dlperf_tasks.store.layout import validate_run_id
from dlperf_tasks.store.store import Store
from dlperf_tasks.web.access import Viewer
from dlperf_tasks.web.app import create_app
from tests.fixtures import synth

H = {"x-user": "alice"}


def _authorize(x_user: str | None = Header(default=None)):
    if x_user is None:
        raise HTTPException(401, "Not authenticated")
    return Viewer(name=x_user, suites=frozenset({"mxnet-bert"}), other_suites=False, known=frozenset({"mxnet-bert"}))


def _drop_manifest(store: Store, run_id: str) -> None:
    """The run's manifest removed from the local store's directory (a publish cut short)."""
    (store.backend.root / store.run_key(run_id, "manifest.json")).unlink()


@pytest.fixture()
def seeded(tmp_path):
    # the store's own path says "not found": a message naming it must not turn a 502 into a 404
    store = Store.from_url(f"file://{tmp_path / 'not found' / 'store'}")
    results = synth.nightly_results(3, trials=2)
    synth.seed_store(store, results, str(tmp_path / "runs"))
    client = TestClient(create_app(lambda: store, authorize=_authorize, dag_of=lambda s: None))
    return store, [r["run"]["run_id"] for r in results], client


def test_the_store_raises_the_kind_where_it_knows_the_condition(seeded):
    store, ids, _ = seeded
    with pytest.raises(NotFoundError, match="run 'mxnet-bert-nope' not found"):
        store.locate("mxnet-bert-nope")
    with pytest.raises(InvalidRunIdError, match="invalid run id 'a/../b'"):
        validate_run_id("a/../b")
    _drop_manifest(store, ids[0])
    with pytest.raises(NotFoundError, match=f"run {ids[0]} is incomplete: .* does not exist"):
        store.read_manifest(ids[0])
    assert issubclass(NotFoundError, StoreError) and issubclass(InvalidRunIdError, StoreError)


def test_results_page_answers_404_for_each_not_found_kind(seeded):
    store, ids, c = seeded
    assert c.get(f"/runs/{ids[-1]}", headers=H).status_code == 200
    missing = c.get("/runs/mxnet-bert-nope", headers=H)
    assert missing.status_code == 404 and "not found" in missing.json()["detail"]
    bad = c.get("/runs/a..b/download.json", headers=H)
    assert bad.status_code == 404 and bad.json()["detail"].startswith("invalid run id 'a..b'")
    _drop_manifest(store, ids[0])
    gone = c.get(f"/runs/{ids[0]}/files/result.json", headers=H)
    assert gone.status_code == 404 and "is incomplete" in gone.json()["detail"]


def test_results_page_answers_502_for_other_store_errors_whatever_their_text(seeded):
    store, ids, c = seeded
    key = store.layout.pointer_key(ids[1])
    store.backend.put_bytes(key, b"{not json", sha256=None, content_type=None)
    resp = c.get(f"/runs/{ids[1]}", headers=H)
    detail = resp.json()["detail"]
    # the message names the store's path ("... not found/store ..."): the kind decides, not the text
    assert resp.status_code == 502 and "not valid JSON" in detail and "not found" in detail, detail


def test_plan_too_large_is_its_own_kind_and_the_map_length_check_uses_it():
    suite = load_suite("tensorflow-bert")
    with pytest.raises(PlanTooLargeError, match="plan too large"):
        plan(suite, Overrides.from_dict({"batch_sizes": list(range(1, 17))}), max_trials=100)
    with pytest.raises(ParamsError, match=r"suite smoke: plan too large: .*\(\[core\] max_map_length = 2\)"):
        check_map_length({"suites": [], "trials": 3}, ["smoke"], limit=2)
    # another planning error is not counted here (the plan step reports it, naming the suite)
    with pytest.raises(PlanError) as err:
        plan(load_suite("smoke"), Overrides.from_dict({"xla": "on"}))
    assert not isinstance(err.value, PlanTooLargeError)
    check_map_length({"suites": [], "xla": "on"}, ["smoke"], limit=2)
