"""DAG schedules come from the catalog: a suite's ``schedule:`` field is checked when
it loads, the suites of one DAG must agree, ``[dlperf] schedule_<dag>`` overrides (none = manual)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlperf_tasks.airflow import settings as settings_mod
from dlperf_tasks.catalog import BUILTIN_DIR, list_suites, load_suite
from dlperf_tasks.catalog.cron import check_cron, group_schedule
from dlperf_tasks.catalog.validate import suite_to_dict
from dlperf_tasks.core.errors import CatalogError


def _suite_file(tmp_path, name: str, **changes) -> str:
    d = yaml.safe_load((BUILTIN_DIR / "smoke.yaml").read_text())
    d.update(id=name, **changes)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(p)


def test_builtin_suites_carry_staggered_crons_one_per_dag():
    by_dag: dict[str, set] = {}
    for s in list_suites():
        by_dag.setdefault(s.dag, set()).add(s.schedule)
    assert all(len(v) == 1 and None not in v for v in by_dag.values()), by_dag
    crons = [next(iter(v)) for v in by_dag.values()]
    assert len(set(crons)) == len(crons), "two DAGs would start on the cluster at the same minute"
    assert suite_to_dict(load_suite("smoke"))["schedule"] == "30 0 * * *"


@pytest.mark.parametrize("bad, words", [("0 3 * *", "5-field"), ("@fortnightly", "unknown preset"),
                                        ("0 3 * * * ; rm -rf /", "5-field"), (5, "not of type|not a cron")])
def test_a_bad_schedule_is_refused_when_the_suite_loads(tmp_path, bad, words):
    with pytest.raises(CatalogError, match=words) as ei:
        load_suite(_suite_file(tmp_path, "sched", schedule=bad))
    assert "schedule" in str(ei.value)


def test_null_or_none_means_manual_and_crons_are_normalised(tmp_path):
    assert load_suite(_suite_file(tmp_path, "s1", schedule=None)).schedule is None
    assert load_suite(_suite_file(tmp_path, "s2", schedule="none")).schedule is None
    assert load_suite(_suite_file(tmp_path, "s3", schedule=" 5  4 * * 1 ")).schedule == "5 4 * * 1"
    assert check_cron("@daily") == "@daily"


def test_suites_of_one_dag_must_agree(tmp_path):
    a = load_suite(_suite_file(tmp_path, "a", schedule="0 1 * * *"))
    b = load_suite(_suite_file(tmp_path, "b", schedule="0 2 * * *"))
    c = load_suite(_suite_file(tmp_path, "c", schedule=None))
    assert group_schedule("smoke", [a, c]) == "0 1 * * *"
    with pytest.raises(ValueError, match="different schedules"):
        group_schedule("smoke", [a, b])
    with pytest.raises(settings_mod.SettingsError, match="different schedules"):
        settings_mod.DlperfSettings(nightly=True).schedule("smoke", [a, b])


def test_settings_take_the_catalog_cron_unless_overridden():
    cfg = settings_mod.load(lambda k, d: {"nightly": "true", "schedule_pytorch": "@weekly",
                                          "schedule_smoke": "off"}.get(k, d))
    assert cfg.schedule("mxnet") == load_suite("mxnet-bert").schedule == "0 1 * * *"
    assert cfg.schedule("pytorch") == "@weekly" and cfg.schedule("smoke") is None
    assert cfg.schedule("no-such-dag", []) is None
    assert not hasattr(settings_mod, "DEFAULT_SCHEDULES")


def test_nightly_runs_are_opt_in_per_deployment():
    """Off (the embedded default and a deployment that says nothing): every DAG is manual only, so
    unpausing one (the trigger form's Unpause box, even for a refused conf) arms nothing; an
    explicit ``schedule_<dag>`` still counts; a word other than true/false is refused."""
    off = settings_mod.load(lambda k, d: {"schedule_pytorch": "@weekly"}.get(k, d))
    assert not off.nightly and off.schedule("mxnet") is None and off.schedule("smoke") is None
    assert off.schedule("pytorch") == "@weekly"
    assert off.catalog_schedule("mxnet") == "0 1 * * *"  # what the DAG page offers to arm
    on = settings_mod.load(lambda k, d: {"nightly": "True"}.get(k, d))
    assert on.nightly and on.schedule("smoke") == load_suite("smoke").schedule
    with pytest.raises(settings_mod.SettingsError, match="nightly: 'yes please' is not true or false"):
        settings_mod.load(lambda k, d: {"nightly": "yes please"}.get(k, d))
    template = (Path(__file__).resolve().parents[2] / "airflow.cfg.template").read_text()
    assert "\nnightly = false\n" in template


def test_the_dag_page_says_whether_the_schedule_is_armed():
    from dlperf_tasks.airflow.dag_factory import schedule_note

    suites = [load_suite("smoke")]
    off = schedule_note("smoke", suites, settings_mod.DlperfSettings())
    assert "manual triggers only" in off and "`[dlperf] nightly = true`" in off and "`30 0 * * *`" in off
    on = schedule_note("smoke", suites, settings_mod.DlperfSettings(nightly=True))
    assert on.startswith("**Schedule:** `30 0 * * *` (UTC)")
