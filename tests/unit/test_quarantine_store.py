"""The quarantine state lives in the run store: Celery workers on different
hosts (different work dirs, no shared disk) and the CLI see one state, ``state/quarantine.json``.
Real local file stores throughout; two Settings with different work dirs stand for two hosts."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from dlperf_tasks.engine.rundir import RunDir
from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core.model import Trial
from dlperf_tasks.store.quarantine import STATE_FILE, Quarantine
from dlperf_tasks.engine.placement import usable_nodes
from dlperf_tasks.remote.inventory import Cluster
from dlperf_tasks.core.settings import Settings
from dlperf_tasks.store import Store
from dlperf_tasks.store.layout import Layout
from dlperf_tasks.store.state import StoreState
from tests.fixtures import synth
from tests.unit.test_decisions_dag import _cell_trial


def _hosts(tmp_path):
    url = f"file://{tmp_path / 'store'}"
    return [Settings.load(cluster="local", store_url=url, work_dir=str(tmp_path / f"host{i}" / "work")) for i in (1, 2)]


def _cluster():
    return Cluster.from_dict({"nodes": [{"name": f"node{i}", "host": f"127.0.0.{i}", "gpus": 8} for i in range(1, 5)]})


def test_worker_on_another_host_and_the_cli_see_one_state(tmp_path, monkeypatch, capsys):
    from dlperf_tasks.cli import main

    host1, host2 = _hosts(tmp_path)
    rd = RunDir.at(tmp_path / "run", "r-20260101T000000-abcdef")
    trial = Trial(Trial.from_dict(_cell_trial()).cell, 3)
    Quarantine.for_settings(host1).add("node3", ["slower than its peers by 20 %"], "r0")  # host 1's aggregate task
    assert usable_nodes(_cluster(), trial, rd, host2) == ["node4", "node1", "node2"]  # host 2's trial
    key = tmp_path / "store" / "state" / "quarantine.json"
    assert list(json.loads(key.read_text())["nodes"]) == ["node3"]
    assert not any(Path(s.work_dir, STATE_FILE).exists() for s in (host1, host2))  # no work-dir copy
    monkeypatch.setenv("DLPERF_STORE_URL", host1.store_url)  # the CLI on a third host: the settings' store
    assert main(["cluster", "quarantine"]) == 0
    assert "node3: since" in capsys.readouterr().out
    assert main(["cluster", "clear", "node3"]) == 0
    assert usable_nodes(_cluster(), trial, rd, host2) == ["node3", "node4", "node1", "node2"]
    assert main(["cluster", "clear", "node3", "--store", host1.store_url]) == 2
    assert "node node3 is not quarantined" in capsys.readouterr().err


def test_a_write_in_between_is_not_lost(tmp_path):
    """Another worker writes between this update's read and its write: the conditional write
    fails and the change is applied again to the new content (both nodes stay)."""
    host1, host2 = _hosts(tmp_path)
    q = Quarantine.for_settings(host1)
    calls = []

    def change(doc):
        calls.append(1)
        if len(calls) == 1:
            Quarantine.for_settings(host2).add("node2", ["errors"], "r2")
        doc["nodes"]["node1"] = {"since": "x", "run_id": "r1", "evidence": []}

    q.state.update(change)
    assert len(calls) == 2 and sorted(q.nodes()) == ["node1", "node2"]


def test_concurrent_adds_all_kept_and_unconditional_endpoint(tmp_path):
    host1, _ = _hosts(tmp_path)
    errors = []

    def add(i):
        try:
            Quarantine.for_settings(host1).add(f"node{i}", [f"e{i}"], f"r{i}")
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(Quarantine.for_settings(host1).nodes()) == [f"node{i}" for i in range(8)]
    store = Store.from_url(host1.store_url)
    store.backend.supports_conditional = False  # an endpoint without conditional PUT: write + re-read
    q = Quarantine(store)
    assert q.clear("node0") is True and q.clear("node0") is False and len(q.nodes()) == 7


def test_state_is_private_not_listed_or_published(tmp_path):
    store = Store.from_url(f"file://{tmp_path / 'store'}")
    ids = synth.seed_store(store, synth.nightly_results(2), str(tmp_path / "seed"))
    before = (store.suites(), store.list_runs())
    Quarantine(store).add("node3", ["slow"], ids[-1])
    assert (store.suites(), store.list_runs()) == before and "state" not in store.suites()
    assert Layout("team").state_key("quarantine") == "team/state/quarantine.json"
    assert Layout().suite_of_index_key(Layout().state_key("quarantine")) is None
    for bad in ("../x", "a/b", "", "x" * 65):
        with pytest.raises(StoreError):
            Layout().state_key(bad)
    (tmp_path / "store" / "state" / "quarantine.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        Quarantine(store).nodes()
    assert StoreState(store, "other", dict).read() == {}
