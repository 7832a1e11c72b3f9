"""The dlperf DAGs' schedule: a cron trigger timetable that never fires a slot from the past.

Airflow's :class:`~airflow.timetables.trigger.CronTriggerTimetable` with ``catchup=False``
schedules ``max(last cron time before now, next after the last run)``: a DAG that had runs and
was paused over one or more slots gets a run for the latest missed slot the moment it is
unpaused (``run_immediately`` only helps a DAG that never ran). On a GPU cluster that is a whole
nightly sweep nobody asked for. :class:`NoMissedSlotCronTimetable` keeps every other behaviour
of the cron trigger timetable but, without catchup, only ever schedules a slot that is now or
later: ``max(next cron time from now, next after the last run)``.

The scheduler recomputes the stored next run each time a run is created and each time the
DAG file is parsed (the dag-processor, every ``[dag_processor] min_file_process_interval``),
so a DAG paused over a slot has a future next run by the time it is unpaused (unless it is
unpaused within one parse interval, or the grace below, of the missed slot).

"From now" has a grace (:data:`MAX_GRACE`, at most half the cron's period): a parse that lands
a few seconds after a slot, before a busy scheduler created that slot's run, must not move the
next run to the following slot (a nightly sweep silently lost; seen with a loaded scheduler).
A slot is only skipped once it is more than the grace in the past.

Custom timetables must be registered with Airflow: ``plugins/dlperf_timetables.py``.
"""

from __future__ import annotations

import datetime as _dt

from airflow._shared.timezones.timezone import coerce_datetime, utcnow
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from airflow.timetables.trigger import CronTriggerTimetable


#: how late a slot may still be scheduled (the scheduler's and dag-processor's loop delays)
MAX_GRACE = _dt.timedelta(minutes=10)


class NoMissedSlotCronTimetable(CronTriggerTimetable):
    """Cron trigger timetable whose next run (without catchup) is never in the past."""

    def __init__(self, cron: str, *, timezone="UTC", interval=_dt.timedelta(), run_immediately=False) -> None:
        super().__init__(cron, timezone=timezone, interval=interval, run_immediately=run_immediately)

    def __eq__(self, other: object) -> bool:
        """Same cron expression and time zone (what Airflow's ``CronMixin.__eq__`` compares), without
        its import of ``airflow.serialization.encoders`` (a cost on every DAG parse: a mapped task
        added to a task group compares the DAGs, hence their schedules)."""
        if other is self:
            return True
        if isinstance(other, NoMissedSlotCronTimetable):
            return self._expression == other._expression and self._timezone == other._timezone
        return super().__eq__(other)

    __hash__ = CronTriggerTimetable.__hash__

    def next_dagrun_info(self, *, last_automated_data_interval: DataInterval | None,
                         restriction: TimeRestriction) -> DagRunInfo | None:
        if restriction.catchup:
            return super().next_dagrun_info(last_automated_data_interval=last_automated_data_interval,
                                            restriction=restriction)
        now = coerce_datetime(utcnow())
        candidates = [self._align_to_next(now - self._grace(now))]
        if last_automated_data_interval is not None:
            candidates.append(self._get_next(last_automated_data_interval.end))
        if restriction.earliest is not None:
            candidates.append(self._align_to_next(restriction.earliest))
        start = max(candidates)
        if restriction.latest is not None and restriction.latest < start:
            return None
        return DagRunInfo.interval(coerce_datetime(start - self._interval), start)

    def _grace(self, now: _dt.datetime) -> _dt.timedelta:
        """:data:`MAX_GRACE`, or half the cron's period when that is shorter (an every-minute
        cron: 30 s; a slot never counts as on time once the next one is nearer)."""
        first = self._align_to_next(now)
        return min(MAX_GRACE, (self._get_next(first) - first) / 2)


def nightly(cron: str | None):
    """The timetable of a dlperf DAG for ``cron`` (None: manual only; ``@once`` as is)."""
    if cron is None or cron == "@once":
        return cron
    return NoMissedSlotCronTimetable(cron, timezone="UTC", run_immediately=False)
