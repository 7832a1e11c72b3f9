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
``schedule_<dag>`` [staggered nightly crons]
    Cron of each DAG (``mxnet``, ``pytorch``, ``tensorflow``, ``megatron``, ``smoke``);
    ``none`` = manual triggers only.
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
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

DAG_NAMES = ("mxnet", "pytorch", "tensorflow", "megatron", "smoke")
# Staggered so that two frameworks never start on the cluster at the same minute.
DEFAULT_SCHEDULES = {
    "mxnet": "0 1 * * *",
    "pytorch": "0 3 * * *",
    "tensorflow": "0 5 * * *",
    "megatron": "0 7 * * *",
    "smoke": "30 0 * * *",
}
POLICIES = ("continue", "fail_fast")
REDACTIONS = ("ips", "hostnames", "users")
_CRON_FIELD = re.compile(r"^[0-9*/,\-A-Za-z]+$")


def project_root() -> Path:
    """The checkout (or install) root: the parent of the ``dlperf_tasks`` package."""
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DlperfSettings:
    cluster: str = "local"
    store_url: str = ""
    work_dir: str = ""
    schedules: dict[str, str | None] = field(default_factory=lambda: dict(DEFAULT_SCHEDULES))
    redaction: tuple[str, ...] = ("ips", "hostnames", "users")
    policy: str = "continue"
    trial_retries: int = 1
    pool: str = "dlperf_nodes"
    pool_slots: int = 1
    lease_wait_s: float = 1800.0
    registry_conn_id: str = "dlperf_registry"

    @property
    def is_local(self) -> bool:
        return self.cluster == "local"

    def schedule(self, dag: str) -> str | None:
        return self.schedules.get(dag)


class SettingsError(ValueError):
    """A ``[dlperf]`` key has a bad value (the message names the key)."""


def _cron(value: str, key: str) -> str | None:
    value = value.strip()
    if value.lower() in ("", "none", "null", "off"):
        return None
    if value.startswith("@"):
        if value not in ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@once"):
            raise SettingsError(f"[dlperf] {key}: unknown preset {value!r}")
        return value
    parts = value.split()
    if len(parts) != 5 or not all(_CRON_FIELD.match(p) for p in parts):
        raise SettingsError(f"[dlperf] {key}: {value!r} is not a 5-field cron expression")
    return value


def _airflow_getter() -> Callable[[str, str | None], str | None]:
    from airflow.configuration import conf  # already imported wherever Airflow runs

    def get(key: str, default: str | None) -> str | None:
        return conf.get("dlperf", key, fallback=default)

    return get


def load(get: Callable[[str, str | None], str | None] | None = None) -> DlperfSettings:
    """Read the ``[dlperf]`` section. ``get(key, default)`` defaults to Airflow's config."""
    get = get or _airflow_getter()
    root = project_root()
    cluster = (get("cluster", "local") or "local").strip()
    store_url = (get("store_url", None) or f"file://{root / '.run' / 'store'}").strip()
    work_dir = (get("work_dir", None) or str(root / ".run" / "work")).strip()
    if not (store_url.startswith("file://") or store_url.startswith("s3://")):
        raise SettingsError(f"[dlperf] store_url: {store_url!r} must start with file:// or s3://")
    schedules = {d: _cron(get(f"schedule_{d}", DEFAULT_SCHEDULES[d]) or "", f"schedule_{d}") for d in DAG_NAMES}
    redaction_raw = (get("redaction", "ips,hostnames,users") or "").strip()
    redaction = () if redaction_raw.lower() == "none" else tuple(r.strip() for r in redaction_raw.split(",") if r.strip())
    unknown = [r for r in redaction if r not in REDACTIONS]
    if unknown:
        raise SettingsError(f"[dlperf] redaction: unknown item(s) {unknown}; known: {', '.join(REDACTIONS)}")
    policy = (get("policy", "continue") or "continue").strip()
    if policy not in POLICIES:
        raise SettingsError(f"[dlperf] policy: {policy!r} is not one of {', '.join(POLICIES)}")
    ints = {}
    for key, default, lo in (("trial_retries", "1", 0), ("pool_slots", "1", 1), ("lease_wait_s", "1800", 0)):
        raw = get(key, default) or default
        try:
            ints[key] = int(raw)
        except ValueError:
            raise SettingsError(f"[dlperf] {key}: {raw!r} is not an integer") from None
        if ints[key] < lo:
            raise SettingsError(f"[dlperf] {key}: must be >= {lo}")
    if cluster != "local" and not os.path.isabs(cluster):
        cluster = str(root / cluster)
    return DlperfSettings(cluster=cluster, store_url=store_url, work_dir=work_dir, schedules=schedules,
                          redaction=redaction, policy=policy, trial_retries=ints["trial_retries"],
                          pool=(get("pool", "dlperf_nodes") or "dlperf_nodes").strip(), pool_slots=ints["pool_slots"],
                          lease_wait_s=float(ints["lease_wait_s"]),
                          registry_conn_id=(get("registry_conn_id", "dlperf_registry") or "dlperf_registry").strip())
