"""Thin adapters: each DAG task calls one engine step (dlperf_tasks.engine).

Only what needs Airflow lives here: the conf is validated with the form's rules
(:mod:`.params`), registry credentials may come from an Airflow connection, and the note of
the DAG run carries the plan's errors and a dry run's commands. Everything heavy is imported
inside the functions, so DAG parsing stays fast. A trial item arrives from XCom as a dict and
is read here (``TrialItem.from_dict``); the engine takes the typed item.
"""

from __future__ import annotations

from typing import Any, Mapping

from dlperf_tasks.engine.attempt import TaskTry
from dlperf_tasks.engine.errors import NonRetriable, Retriable  # noqa: F401 (the operators map them)
from dlperf_tasks.remote.trialdocs import TrialState, Verdict


def with_registry_connection(cluster, conn_id: str):
    """The cluster, with the registry password (and login) from the Airflow connection
    ``conn_id`` when the inventory's ``password_env`` gives none. Outside a task, or without
    such a connection, the cluster is returned unchanged (login then fails naming the variable)."""
    import dataclasses

    reg = cluster.registry
    if reg is None or not conn_id or reg.resolve_password():
        return cluster
    try:
        from airflow.sdk import Connection

        conn = Connection.get(conn_id)
    except Exception:  # noqa: BLE001 - no such connection / not inside a task: keep the inventory's
        return cluster
    if not getattr(conn, "password", None):
        return cluster
    if conn.host and conn.host.strip() != reg.server:
        raise NonRetriable(f"connection {conn_id}: host {conn.host!r} is not the inventory's registry {reg.server!r}")
    reg = dataclasses.replace(reg, password=conn.password,
                              **({"username": conn.login, "username_env": None} if conn.login else {}))
    return dataclasses.replace(cluster, registry=reg)


def ssh_connection(conn_id: str) -> dict[str, Any] | None:
    """An Airflow SSH connection as the dict ``remote.connections`` reads (None when missing)."""
    try:
        from airflow.sdk import Connection

        conn = Connection.get(conn_id)
    except Exception:  # noqa: BLE001 - no such connection (the caller names the node and the id)
        return None
    return {"login": conn.login, "password": conn.password, "extra": conn.extra_dejson}


def plan_run(dag_name: str, suite_ids: list[str], conf: Mapping[str, Any] | None, settings,
             dag_run_id: str | None = None):
    """Validate the conf (unknown fields, bad values), then the engine's plan step: the
    :class:`~dlperf_tasks.engine.runset.RunSet` (the caller puts its ``to_dict()`` on XCom)."""
    from dlperf_tasks.airflow.params import ParamsError, validate_conf
    from dlperf_tasks.engine.setup import plan_runs

    try:
        params = validate_conf(conf, suite_ids, settings.policy)
    except ParamsError as exc:
        raise NonRetriable(f"invalid run parameter {exc}") from None
    return plan_runs(dag_name, suite_ids, params, settings, group_run_id=dag_run_id)


def run_trial(item: Mapping[str, Any], settings, attempt: TaskTry | None = None) -> dict[str, Any]:
    """One trial in this worker's own run dir: the run's staged files pulled first, the trial's
    record, logs and telemetry pushed to the staging area after (no shared disk)."""
    from dlperf_tasks.engine.trials import run_item
    from dlperf_tasks.engine import staging
    from dlperf_tasks.engine.runset import TrialItem

    local = staging.enter_trial(TrialItem.from_dict(item), settings)
    try:
        return run_item(local, settings, attempt)
    finally:
        staging.leave_trial(local, settings)


#: a deferred trial's node leases last this long past the trigger's last renewal (it renews them
#: every quarter of it): a triggerer that restarts, or a resume that waits for a worker slot, keeps
#: the nodes; a trial nobody watches any more frees them after this long
DEFERRED_LEASE_TTL_S = 900.0


def start_trial(item: Mapping[str, Any], settings, attempt: TaskTry | None = None, *,
                lease_wait_s: float | None = None, busy_returns: bool = False) -> dict[str, Any]:
    """The first half of a deferrable trial in this worker's run dir: ``{"record": ...}`` when it
    is done already (dry run, reused, local runtime, no nodes), else ``{"started": state}`` (the
    remote jobs run; nothing to push yet), or with ``busy_returns`` ``{"waiting": reason}`` when no
    nodes were free within ``lease_wait_s`` (nothing recorded: the task waits deferred, calls again)."""
    from dlperf_tasks.engine.attempt import LeaseTerms
    from dlperf_tasks.engine.trials import start_item
    from dlperf_tasks.engine import staging
    from dlperf_tasks.engine.runset import TrialItem

    local = staging.enter_trial(TrialItem.from_dict(item), settings)
    done = True
    try:
        got = start_item(local, settings, attempt,
                         lease=LeaseTerms(DEFERRED_LEASE_TTL_S, wait_s=lease_wait_s, busy_returns=busy_returns))
        done = "record" in got
        return got
    finally:
        if done:
            staging.leave_trial(local, settings)


def resume_trial(item: Mapping[str, Any], settings, state: TrialState, verdict: Verdict,
                 attempt: TaskTry | None = None) -> dict[str, Any]:
    """The second half, in whichever worker resumes the task: logs copied from the nodes into
    its own run dir, gated, recorded, pushed to staging; leases released."""
    from dlperf_tasks.engine.trials import finish_item
    from dlperf_tasks.engine import staging
    from dlperf_tasks.engine.runset import TrialItem

    local = staging.enter_trial(TrialItem.from_dict(item), settings)
    try:
        return finish_item(local, settings, state, verdict, attempt)
    finally:
        staging.leave_trial(local, settings)


def stop_trial(item: Mapping[str, Any], settings) -> None:
    from dlperf_tasks.engine.runset import TrialItem
    from dlperf_tasks.engine.trials import stop_trial as stop

    stop(TrialItem.from_dict(item), settings)


def set_note(context, text: str) -> None:
    """Put ``text`` in the DAG run's note (shown in the grid); best effort. Under a real executor
    the task cannot write the database: the scheduler copies XCom ``dlperf_note`` (run_notes.py)."""
    try:
        context["ti"].xcom_push(key="dlperf_note", value=text[:1000])
    except Exception:  # noqa: BLE001 - outside a task
        pass
    try:
        from airflow.sdk import get_current_context  # noqa: F401 - inside a task only

        dag_run = context["dag_run"]
        if hasattr(dag_run, "note"):
            dag_run.note = text[:1000]
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session

        with create_session() as session:
            dr = session.query(DagRun).filter(DagRun.dag_id == dag_run.dag_id, DagRun.run_id == dag_run.run_id).first()
            if dr is not None:
                dr.note = text[:1000]
    except Exception:  # noqa: BLE001 - a note is a convenience; the task log has the text too
        pass
