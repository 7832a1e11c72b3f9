"""Nightly schedules do not fire when a DAG is unpaused: the DAGs use Airflow's
cron trigger timetable with ``run_immediately=False``, so the first run after an unpause is the
next cron time in the future, never the last one in the past."""

from __future__ import annotations

import datetime as dt

import pytest

pytestmark = [pytest.mark.airflow]


def test_unpausing_a_nightly_dag_schedules_the_next_cron_time_not_the_last():
    from airflow.timetables.base import TimeRestriction
    from airflow.timetables.trigger import CronTriggerTimetable

    from dlperf_tasks.airflow import dag_factory
    from dlperf_tasks.airflow import timetable as timetable_mod
    from dlperf_tasks.airflow.settings import DlperfSettings

    dags = dag_factory.build_all(DlperfSettings(schedules={"smoke": "30 0 * * *", "mxnet": "0 1 * * *"}))
    tt = dags["dlperf_smoke"].timetable
    assert isinstance(tt, CronTriggerTimetable)
    now = dt.datetime.now(dt.timezone.utc)
    info = tt.next_dagrun_info(last_automated_data_interval=None,
                               restriction=TimeRestriction(earliest=dags["dlperf_smoke"].start_date, latest=None,
                                                           catchup=False))
    # a past 00:30 slot is not run on unpause (beyond the late-scheduler grace, checked below)
    assert info is not None and info.run_after > now - timetable_mod.MAX_GRACE, info
    assert info.run_after - now <= dt.timedelta(days=1)
    assert dags["dlperf_mxnet"].timetable._expression != tt._expression  # staggered


def test_schedule_none_means_manual_only():
    from dlperf_tasks.airflow import dag_factory
    from dlperf_tasks.airflow.settings import DlperfSettings

    dags = dag_factory.build_all(DlperfSettings(schedules={"smoke": None}))
    assert type(dags["dlperf_smoke"].timetable).__name__ == "NullTimetable"


PROBE_DAG = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG
from dlperf_tasks.airflow.dag_factory import timetable

# EmptyOperator: the scheduler finishes the run itself (no worker, no api-server needed)
with DAG("dlperf_schedule_probe", schedule=timetable("* * * * *"), catchup=False, max_active_runs=1,
         is_paused_upon_creation=True, tags=["dlperf"]) as dag:
    EmptyOperator(task_id="noop")
"""


class _MiniAirflow:
    """A scheduler + dag-processor of their own (own SQLite DB, a DAG bundle holding only the
    probe DAG, the project's plugins folder): nothing shared with the session's Airflow."""

    def __init__(self, tmp_path, session_cfg):
        import os
        import shutil
        import sys
        from pathlib import Path

        self.home, self.bin = tmp_path / "af", Path(sys.executable).parent
        (self.home / "dags").mkdir(parents=True)
        (self.home / "dags" / "probe_dag.py").write_text(PROBE_DAG)
        shutil.copy(session_cfg, self.home / "airflow.cfg")
        self.db = self.home / "airflow.db"
        bundles = [{"name": "probe", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {"path": str(self.home / "dags"), "refresh_interval": 0}}]
        import json

        self.env = dict(os.environ, AIRFLOW_HOME=str(self.home), AIRFLOW_CONFIG=str(self.home / "airflow.cfg"),
                        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{self.db}",
                        AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST=json.dumps(bundles),
                        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="5",
                        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
                        AIRFLOW__CORE__LOAD_EXAMPLES="False")
        self.procs: dict = {}

    def cli(self, *args: str) -> str:
        import subprocess

        r = subprocess.run([str(self.bin / "airflow"), *args], env=self.env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, f"airflow {' '.join(args)}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        return r.stdout

    def start(self) -> None:
        import subprocess

        self.cli("db", "migrate")
        for name in ("dag-processor", "scheduler"):
            with open(self.home / f"{name}.log", "wb") as fh:
                self.procs[name] = subprocess.Popen([str(self.bin / "airflow"), name], env=self.env, stdout=fh,
                                                    stderr=subprocess.STDOUT, start_new_session=True,
                                                    cwd=str(self.home))

    def stop(self) -> None:
        from dlperf_tasks.airflow.cli_serve import stop_all

        stop_all(self.procs, grace_s=30)

    def query(self, sql: str, *args):
        import sqlite3

        with sqlite3.connect(self.db, timeout=30) as c:
            return c.execute(sql, args).fetchall()

    def runs(self) -> list[tuple[str, dt.datetime]]:
        rows = self.query("SELECT run_type, run_after FROM dag_run WHERE dag_id = 'dlperf_schedule_probe' "
                          "ORDER BY run_after")
        return [(t, dt.datetime.fromisoformat(str(a)).replace(tzinfo=dt.timezone.utc)) for t, a in rows]

    def tail(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")[-3000:]


def _wait(pred, timeout: float, what: str, mini):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}: runs {mini.runs()}\n{mini.tail('scheduler')}"
                         f"\n{mini.tail('dag-processor')}")


def _next_create_after(mini) -> dt.datetime:
    (got,), = mini.query("SELECT next_dagrun_create_after FROM dag WHERE dag_id = 'dlperf_schedule_probe'")
    return dt.datetime.fromisoformat(str(got)).replace(tzinfo=dt.timezone.utc) if got else dt.datetime.min.replace(
        tzinfo=dt.timezone.utc)


def _sleep_until(t: dt.datetime) -> None:
    import time

    time.sleep(max(0.0, (t - dt.datetime.now(dt.timezone.utc)).total_seconds()))


def _past_grace_with_a_reparse(mini) -> dt.datetime:
    """Wait until the last every-minute slot is more than the timetable's grace (30 s) in the
    past and the dag-processor has re-parsed since (the stored next run is then the coming
    slot); return that last slot. A slot under 30 s past counts as on time (a late scheduler)."""
    import time

    for _ in range(4):
        now = dt.datetime.now(dt.timezone.utc)
        last = now.replace(second=0, microsecond=0)
        if now.second > 45:  # too close to the next slot: use the next minute
            last += dt.timedelta(minutes=1)
        _sleep_until(last + dt.timedelta(seconds=32))
        while dt.datetime.now(dt.timezone.utc) < last + dt.timedelta(seconds=55):
            if _next_create_after(mini) > last:
                return last
            time.sleep(1)
    raise AssertionError(f"no re-parse within 23 s of a slot's grace, 4 times\n{mini.tail('dag-processor')}")


@pytest.mark.slow
def test_real_scheduler_skips_a_slot_missed_while_paused(airflow_home, tmp_path):
    """Every-minute cron, real scheduler + dag-processor: unpaused, the DAG first runs at the
    next minute (not the last one); paused right after that run, it misses the next slot;
    unpaused again after it (once the dag-processor re-parsed the DAG), no run comes for the
    missed slot, and a later slot fires."""
    mini = _MiniAirflow(tmp_path, airflow_home / "airflow.cfg")
    mini.start()
    try:
        _wait(lambda: mini.query("SELECT 1 FROM dag WHERE dag_id = 'dlperf_schedule_probe'"), 180, "the probe DAG",
              mini)
        last = _past_grace_with_a_reparse(mini)
        t0 = dt.datetime.now(dt.timezone.utc)
        mini.cli("dags", "unpause", "dlperf_schedule_probe")
        (kind, t1), = _wait(mini.runs, 150, "the first scheduled run", mini)
        mini.cli("dags", "pause", "dlperf_schedule_probe")
        # the next cron time, not the last one (more than the 30 s grace before the unpause)
        assert kind == "scheduled" and t1 > t0 and t1 > last, (t1, t0, last)
        assert t1.second == 0 and t1 - t0 <= dt.timedelta(seconds=61)
        t2 = t1 + dt.timedelta(minutes=1)
        # paused over slot t2; the dag-processor re-parses every 5 s (the stored next run is recomputed)
        _sleep_until(t2 + dt.timedelta(seconds=20))
        assert [r for _, r in mini.runs()] == [t1]
        # what the timetable needs (and a busy machine delays): one parse after the missed slot
        _wait(lambda: _next_create_after(mini) > t2, 120, "a re-parse after the missed slot", mini)
        mini.cli("dags", "unpause", "dlperf_schedule_probe")
        (_, second), = _wait(lambda: mini.runs()[1:], 150, "the slot after the unpause", mini)
        assert second > t2, f"the slot {t2} missed while paused fired on unpause"
        assert mini.runs() == [("scheduled", t1), ("scheduled", second)] and second.second == 0
    finally:
        mini.stop()


def test_timetable_never_schedules_a_past_slot_without_catchup():
    """The timetable's answer at unpause time (no processes): a DAG whose last run was at 01:00
    and that was paused until 05:20 gets 01:00 tomorrow, where Airflow's own cron trigger
    timetable gives 01:00 today (the missed slot, at once); catchup keeps Airflow's rule; a slot
    a few seconds past (a late scheduler) is still scheduled."""
    import contextlib
    from unittest import mock

    from airflow.timetables.base import DataInterval, TimeRestriction
    from airflow.timetables.trigger import CronTriggerTimetable

    from dlperf_tasks.airflow.dag_factory import timetable

    @contextlib.contextmanager
    def at(when):  # both timetables read the clock through their module's utcnow
        with mock.patch("dlperf_tasks.airflow.timetable.utcnow", lambda: when), \
                mock.patch("airflow.timetables.trigger.utcnow", lambda: when):
            yield

    utc = dt.timezone.utc
    ours, plain = timetable("0 1 * * *"), CronTriggerTimetable("0 1 * * *", timezone="UTC")
    last = DataInterval(dt.datetime(2026, 3, 1, 1, tzinfo=utc), dt.datetime(2026, 3, 1, 1, tzinfo=utc))
    no_catchup = TimeRestriction(earliest=None, latest=None, catchup=False)
    with at(dt.datetime(2026, 3, 4, 5, 20, tzinfo=utc)):
        assert plain.next_dagrun_info(last_automated_data_interval=last, restriction=no_catchup).run_after == \
            dt.datetime(2026, 3, 4, 1, tzinfo=utc)  # Airflow: the missed slot, in the past
        for prev in (last, None):
            info = ours.next_dagrun_info(last_automated_data_interval=prev, restriction=no_catchup)
            assert info.run_after == dt.datetime(2026, 3, 5, 1, tzinfo=utc), prev
        catchup = TimeRestriction(earliest=None, latest=None, catchup=True)
        assert ours.next_dagrun_info(last_automated_data_interval=last, restriction=catchup).run_after == \
            dt.datetime(2026, 3, 2, 1, tzinfo=utc)
    # the scheduler asks right after creating the 01:00 run: the next slot is the next day's
    with at(dt.datetime(2026, 3, 1, 1, 0, 2, tzinfo=utc)):
        info = ours.next_dagrun_info(last_automated_data_interval=last, restriction=no_catchup)
        assert info.run_after == dt.datetime(2026, 3, 2, 1, tzinfo=utc)
    # a parse that lands 3 s after a slot, before a busy scheduler created its run: still that slot
    # (the grace), not tomorrow's; an every-minute cron's grace is half its period (30 s)
    with at(dt.datetime(2026, 3, 2, 1, 0, 3, tzinfo=utc)):
        info = ours.next_dagrun_info(last_automated_data_interval=last, restriction=no_catchup)
        assert info.run_after == dt.datetime(2026, 3, 2, 1, tzinfo=utc)
    minutely = timetable("* * * * *")
    for now, slot in ((dt.datetime(2026, 3, 2, 1, 0, 29, tzinfo=utc), dt.datetime(2026, 3, 2, 1, 0, tzinfo=utc)),
                      (dt.datetime(2026, 3, 2, 1, 0, 31, tzinfo=utc), dt.datetime(2026, 3, 2, 1, 1, tzinfo=utc))):
        with at(now):
            assert minutely.next_dagrun_info(last_automated_data_interval=None,
                                             restriction=no_catchup).run_after == slot, now
    # what the scheduler stores and reads back: the serialized DAG keeps our class (plugin-registered)
    from airflow.serialization.encoders import encode_timetable
    from airflow.serialization.decoders import decode_timetable

    assert type(decode_timetable(encode_timetable(ours))) is type(ours)
