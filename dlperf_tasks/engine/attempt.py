"""How one trial's task runs: which try it is (:class:`TaskTry`) and how its nodes are leased
(:class:`LeaseTerms`); small typed objects the scheduler's task layer hands
:mod:`dlperf_tasks.engine.trials` instead of many keyword parameters."""

from __future__ import annotations

import dataclasses
from typing import Callable

#: lease TTL of a trial's nodes while this process holds them (start, finish, in-process watch)
FINISH_LEASE_TTL_S = 120.0


@dataclasses.dataclass(frozen=True)
class TaskTry:
    """Which try of a trial's task this is (``number`` of ``of``: a retriable failure raises
    Retriable while tries remain), and where the task's progress lines go."""

    number: int = 1
    of: int = 1
    log: Callable[[str], None] | None = None


@dataclasses.dataclass(frozen=True)
class LeaseTerms:
    """How a trial's nodes are leased: the TTL the watch renews them to, how long to wait for
    free nodes (None: the settings' ``lease_wait_s``), and whether to return ``{"waiting": why}``
    instead of recording the trial as not run when none were free by then."""

    ttl_s: float = FINISH_LEASE_TTL_S
    wait_s: float | None = None
    busy_returns: bool = False
