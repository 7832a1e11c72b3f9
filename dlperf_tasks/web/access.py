"""Who may read which results (pure: the Airflow plugin supplies the auth manager's answers).

Rule: a user who may read a dlperf DAG may read the results of that DAG's suites. Suites the
catalog does not know (runs published by ``dlperf publish`` from elsewhere) are readable by a
user who may read DAGs in general (the auth manager's "all DAGs" answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping


class AccessDenied(Exception):
    """The user is authenticated but may read no dlperf results."""


@dataclass(frozen=True)
class Viewer:
    name: str
    suites: frozenset[str]  # catalog suites whose DAG the user may read
    other_suites: bool  # suites outside the catalog
    known: frozenset[str] = frozenset()  # every catalog suite

    def can_read(self, suite: str | None) -> bool:
        if suite is None:
            return False
        if suite in self.known:
            return suite in self.suites
        return self.other_suites


def viewer_for(name: str, suite_dags: Mapping[str, str], can_read_dag: Callable[[str | None], bool]) -> Viewer:
    """``suite_dags``: suite id -> dag id; ``can_read_dag(dag_id)`` asks the auth manager
    (``None`` = DAGs in general). Raises :class:`AccessDenied` when nothing is readable."""
    answers: dict[str | None, bool] = {}

    def ask(dag_id: str | None) -> bool:
        if dag_id not in answers:
            answers[dag_id] = bool(can_read_dag(dag_id))
        return answers[dag_id]

    suites = frozenset(s for s, dag in suite_dags.items() if ask(dag))
    other = ask(None)
    if not suites and not other:
        raise AccessDenied(f"user {name!r} may not read the dlperf DAGs, so not their results either")
    return Viewer(name=name, suites=suites, other_suites=other, known=frozenset(suite_dags))


def open_viewer() -> Viewer:
    """Everything readable: for a results app run outside Airflow on a trusted machine."""
    return Viewer(name="local", suites=frozenset(), other_suites=True)


def login_redirect(method: str, accept: str, login_url: str, next_url: str) -> str | None:
    """Where a request without a valid session goes: a browser opening a page (a
    GET that accepts HTML, e.g. a bookmarked ``/dlperf/``) is sent to the login page, which
    brings it back to ``next_url``; API clients and everything else get the 401/403 as before
    (None)."""
    if method.upper() not in ("GET", "HEAD") or "text/html" not in (accept or "").lower():
        return None
    sep = "&" if "?" in login_url else "?"
    from urllib.parse import urlencode

    return login_url if "next=" in login_url else f"{login_url}{sep}{urlencode({'next': next_url})}"
