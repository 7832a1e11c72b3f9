"""DAG schedules: a suite's ``schedule:`` field and ``[dlperf] schedule_<dag>`` overrides.

A schedule is a 5-field cron expression (``"0 1 * * *"``), one of the presets ``@hourly``
``@daily`` ``@weekly`` ``@monthly`` ``@yearly`` ``@once``, or null (``none``/``off``/empty:
manual triggers only). Checked here, without any scheduler import, so the catalog refuses a bad
one when the suite loads and the settings layer refuses a bad override with the same rule.
"""

from __future__ import annotations

import re

PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@once")
_NONE = ("", "none", "null", "off")
#: one cron field: digits, names (jan, mon), ``*`` ``/`` ``,`` ``-``
_FIELD = re.compile(r"^[0-9*/,\-A-Za-z]+$")


def check_cron(value: str | None) -> str | None:
    """The normalised schedule (None = manual only); ValueError saying what is wrong."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a cron expression (a string such as '0 1 * * *', or null)")
    value = value.strip()
    if value.lower() in _NONE:
        return None
    if value.startswith("@"):
        if value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; known: {', '.join(PRESETS)}")
        return value
    parts = value.split()
    if len(parts) != 5 or not all(_FIELD.match(p) for p in parts):
        raise ValueError(f"{value!r} is not a 5-field cron expression (minute hour day month weekday)")
    return " ".join(parts)


def group_schedule(dag: str, suites: list) -> str | None:
    """The schedule of DAG ``dag`` from its suites' ``schedule`` fields: they must agree (a suite
    without the field, or with null, follows the others); ValueError naming the suites otherwise."""
    found = {s.id: s.schedule for s in suites if getattr(s, "schedule", None)}
    if len(set(found.values())) > 1:
        listed = ", ".join(f"{sid}: {cron!r}" for sid, cron in sorted(found.items()))
        raise ValueError(f"the suites of DAG {dag!r} declare different schedules ({listed}); "
                         "give them one schedule, or set [dlperf] schedule_" + dag)
    return next(iter(found.values()), None)
