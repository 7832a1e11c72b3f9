"""The plain-data documents a started remote trial is carried by, typed: its state (start ->
watch -> finish, possibly in other processes: the state crosses XCom as JSON) and the watcher's
verdict (:func:`dlperf_tasks.remote.jobpoll.poll_once`, a deferred task's trigger)."""

from __future__ import annotations

from typing import Any, Required, TypedDict


class Failure(TypedDict):
    """Why a trial could not start: a TrialStatus value and the reason."""

    status: str
    reason: str


class Verdict(TypedDict, total=False):
    """How the jobs of a trial ended: ``status`` (exited, unreachable, vanished, timeout, hang,
    stopped), the exit status per node (None: unknown), the nodes concerned, the reason, and the
    trigger's last watch (its lease renewals)."""

    status: Required[str]
    exit_codes: dict[str, int | None]
    reason: str
    nodes: list[str]
    watch: dict[str, Any]


class TrialState(TypedDict, total=False):
    """A started trial: the trial (``Trial.to_dict``), run id, nodes in rank order, attempt, start
    time, ranks started, the jobs' watch (``JobsWatch.to_dict``; None when nothing started),
    ``failed`` when it could not start, the nodes found unreachable, each node's GPU model and image digest (``node_env``), and what the engine adds:
    the telemetry sampler's document, the node leases, the image and the interconnect probe's result
    (``interconnect``, multi-node cells). A start that found no free nodes returns only ``waiting`` (why)."""

    trial: dict[str, Any]
    run_id: str
    nodes: list[str]
    attempt: int
    started: float
    ranks: list[int]
    watch: dict[str, Any] | None
    failed: Failure | None
    unreachable: list[str]
    telemetry: dict[str, Any] | None
    leases: list[dict[str, Any]]
    image: str | None
    waiting: str
    node_env: dict[str, dict[str, str | None]]
    interconnect: dict[str, Any]
