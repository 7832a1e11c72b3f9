"""dlperf's own settings: the ``[dlperf]`` section of airflow.cfg.

Every key can also come from the environment as ``AIRFLOW__DLPERF__<KEY>`` (Airflow's
usual rule), which is how containers and tests override them. Secrets never live here:
SSH keys, registry passwords and S3 credentials come from Airflow connections or the
environment (see docs/deploy.md).

Keys (defaults in brackets):

``cluster`` [local]
    ``local`` (this machine, worker processes on the host) or the path of a cluster
    inventory YAML (dlperf_tasks.remote.inventory).
``store_url`` [file://<project>/.run/store]
    Where published runs go: ``file:///dir`` or ``s3://bucket/prefix``.
``work_dir`` [<project>/.run/work]
    Scratch directory for run directories before they are published.
``nightly`` [false]
    Opt-in, per deployment: ``true`` arms each DAG's nightly cron (its suites' ``schedule:``
    field, catalog/cron.py; the built-in suites carry staggered nightly crons). Off, every DAG
    is manual only: unpausing one (the trigger form's "Unpause" box does it even when the
    trigger is refused) starts nothing by itself. The DAG page says which.
``schedule_<dag>`` [the catalog's, when ``nightly``]
    Overrides the cron of one DAG (``mxnet``, ``pytorch``, ``tensorflow``, ``megatron``,
    ``smoke``, or a DAG a catalog adds), whatever ``nightly`` says; ``none`` = manual triggers
    only. A DAG whose suites have no ``schedule:`` is manual only.
``redaction`` [ips,hostnames,users]
    What is removed from logs before they are published (comma list; ``none`` = nothing).
    Host names, node names and user names come from the cluster inventory, which publish
    passes to the store; IP addresses are always found by pattern.
``policy`` [continue]
    What a failed or invalid trial does to a run: ``continue`` (record it, go on: DLPerf's
    way) or ``fail_fast`` (fail the run at the first non-OK trial).
``trial_retries`` [1]  retries of a trial that failed for a retriable reason (node
    unreachable, launch failure, timeout, hang).
``lease_wait_s`` [1800]  how long a trial waits for free nodes (leases held by other runs).
``registry_conn_id`` [dlperf_registry]
    Airflow connection with the container registry's login/password, used when the
    inventory's ``password_env`` variable is not set (connection ``login`` overrides the
    inventory's user name; ``host`` must be empty or the inventory's registry server).
``pool`` [dlperf_nodes] / ``pool_slots`` [1]
    The Airflow pool every trial runs in (how many trials may run at once).
``catalog_path``, ``notify_url``, ``notify_on``, ``telemetry``, ``defer_trials``, ``trial_poll_s``,
``store_deadline_s`` / ``store_stall_s`` / ``store_min_bytes`` / ``store_max_doc_bytes`` / ``store_max_index_bytes``
    The other core settings (defaults and checks in dlperf_tasks.core.settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from dlperf_tasks.core import settings as core
from dlperf_tasks.core.settings import POLICIES, REDACTIONS, SettingsError, project_root  # noqa: F401 (re-exported)

@dataclass(frozen=True)
class DlperfSettings(core.Settings):
    """The core settings plus what only the scheduler uses (pool, crons, registry connection)."""

    #: ``[dlperf] schedule_<dag>`` overrides (checked when loaded); other DAGs: the catalog's
    schedules: dict[str, str | None] = field(default_factory=dict)
    nightly: bool = False  # ``[dlperf] nightly``: the catalog's crons armed (opt-in per deployment)
    pool: str = "dlperf_nodes"
    pool_slots: int = 1
    registry_conn_id: str = "dlperf_registry"
    _get: Callable | None = field(default=None, compare=False, repr=False)

    def resolve_cluster(self, cluster):
        """Registry credentials from the Airflow connection when the environment has none; SSH
        key text (and passphrase) of nodes that name an ``ssh_conn_id`` from that connection."""
        from dlperf_tasks.airflow.tasks import ssh_connection, with_registry_connection
        from dlperf_tasks.remote.connections import with_ssh_connections

        return with_ssh_connections(with_registry_connection(cluster, self.registry_conn_id), ssh_connection)

    def schedule(self, dag: str, suites: list | None = None) -> str | None:
        """The DAG's cron: ``[dlperf] schedule_<dag>`` if set, else with ``nightly`` its suites'
        ``schedule`` field, else None (manual only)."""
        if dag in self.schedules:
            return self.schedules[dag]
        if self._get is not None:
            raw = self._get(f"schedule_{dag}", None)
            if raw is not None:
                return _cron(raw, f"schedule_{dag}")
        return self.catalog_schedule(dag, suites) if self.nightly else None

    def catalog_schedule(self, dag: str, suites: list | None = None) -> str | None:
        """The DAG's suites' ``schedule`` field (``suites`` None: the catalog's suites of that DAG)."""
        from dlperf_tasks.catalog.cron import group_schedule

        if suites is None:
            from dlperf_tasks.catalog.loader import suites_by_group

            suites = suites_by_group(list(self.catalog_path) or None)[0].get(dag, [])
        try:
            return group_schedule(dag, suites)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None


def _cron(value: str, key: str) -> str | None:
    from dlperf_tasks.catalog.cron import check_cron

    try:
        return check_cron(value)
    except ValueError as exc:
        raise SettingsError(f"[dlperf] {key}: {exc}") from None


def _overrides(get: Callable[[str, str | None], str | None], catalog_path: tuple[str, ...]) -> dict[str, str | None]:
    """The ``schedule_<dag>`` options set for the catalog's DAGs, checked now (a bad cron fails
    the settings load, not a DAG parse later)."""
    from dlperf_tasks.catalog.loader import dag_names
    from dlperf_tasks.core.errors import CatalogError

    try:
        dags = dag_names(list(catalog_path) or None)
    except CatalogError:
        dags = []
    out = {}
    for dag in dags:
        raw = get(f"schedule_{dag}", None)
        if raw is not None:
            out[dag] = _cron(raw, f"schedule_{dag}")
    return out


def _airflow_getter() -> Callable[[str, str | None], str | None]:
    from airflow.configuration import conf  # already imported wherever Airflow runs

    def get(key: str, default: str | None) -> str | None:
        return conf.get("dlperf", key, fallback=default)

    return get


def load(get: Callable[[str, str | None], str | None] | None = None) -> DlperfSettings:
    """Map the ``[dlperf]`` section (``get(key, default)``, default Airflow's config) onto the
    core settings (environment variables ``DLPERF_*`` still win, see dlperf_tasks.core.settings)."""
    get = get or _airflow_getter()
    try:
        values = core.load_values(get, source="[dlperf]")
    except SettingsError as exc:
        raise SettingsError(f"[dlperf] {exc}") from None
    schedules = _overrides(get, values.get("catalog_path") or ())
    raw_slots = get("pool_slots", "1") or "1"
    try:
        pool_slots = int(raw_slots)
    except ValueError:
        raise SettingsError(f"[dlperf] pool_slots: {raw_slots!r} is not an integer") from None
    if pool_slots < 1:
        raise SettingsError("[dlperf] pool_slots: must be >= 1")
    nightly = (get("nightly", "false") or "false").strip().lower()
    if nightly not in ("true", "false"):
        raise SettingsError(f"[dlperf] nightly: {nightly!r} is not true or false")
    return DlperfSettings(**values, schedules=schedules, nightly=nightly == "true", pool=(get("pool", "dlperf_nodes") or "dlperf_nodes").strip(),
                          pool_slots=pool_slots,
                          registry_conn_id=(get("registry_conn_id", "dlperf_registry") or "dlperf_registry").strip(),
                          _get=get)
