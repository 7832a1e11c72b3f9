"""One poll loop per run for the Slurm jobs deferred trial tasks wait on (in the triggerer's event loop).

Each trial task of a DAG run defers with its own trigger; the triggers of one run (one cluster file, one
run id) share a :class:`RunPoller`: it keeps ONE SSH connection to the login node and asks ``squeue`` and
``sacct`` for every registered job in one command per round (``remote.slurm_trial.poll``), then wakes the
waiting triggers. No worker slot is held while the jobs wait or run. The poller ends with its last job.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote import slurm_trial
from dlperf_tasks.remote.slurm_jobs import JobState

_POLLERS: dict[tuple[Any, ...], "RunPoller"] = {}


class PollFailed(RemoteError):
    """The login node could not be polled ``max_failures`` times in a row."""


class RunPoller:
    """The jobs of one run that triggers of this event loop wait on, polled together."""

    def __init__(self, make_pool: Callable[[], Any], login: str, poll_s: float, max_failures: int = 20,
                 poll: Callable[..., dict[str, JobState]] = slurm_trial.poll):
        self.make_pool, self.login, self.poll_s, self.max_failures = make_pool, login, poll_s, max_failures
        self.poll = poll
        self.jobs: dict[str, int] = {}  # job id -> watchers
        self.states: dict[str, JobState] = {}
        self.rounds = 0  # polls done (a test reads how many SSH commands a run's jobs took)
        self.error: str | None = None
        self._tick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.key: tuple[Any, ...] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def shared(cls, key: tuple[Any, ...], make_pool: Callable[[], Any], login: str, poll_s: float,
               **kw: Any) -> "RunPoller":
        """The poller of ``key`` (cluster file, run id) in the running event loop, made when first asked
        (a test harness may run each trigger in an event loop of its own: a poller never crosses loops)."""
        loop = asyncio.get_running_loop()
        poller = _POLLERS.get(key)
        if poller is None or poller.loop is not loop:  # one from a loop that has ended is dropped
            poller = _POLLERS[key] = cls(make_pool, login, poll_s, **kw)
            poller.key, poller.loop = key, loop
        poller.poll_s = min(poller.poll_s, poll_s)
        return poller

    async def watch(self, job_id: str) -> AsyncIterator[JobState | None]:
        """Each round's state of ``job_id`` (None while no poller round has seen it); raises
        :class:`PollFailed` when the login node could not be reached for ``max_failures`` rounds."""
        self.jobs[job_id] = self.jobs.get(job_id, 0) + 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        try:
            while True:
                tick = self._tick
                await tick.wait()
                if self.error:
                    raise PollFailed(self.error)
                yield self.states.get(job_id)
        finally:
            self.jobs[job_id] -= 1
            if self.jobs[job_id] <= 0:
                del self.jobs[job_id]
                self.states.pop(job_id, None)

    async def _loop(self) -> None:
        self.error = None
        pool = await asyncio.to_thread(self.make_pool)
        failures = 0
        try:
            while self.jobs:
                try:
                    states = await asyncio.to_thread(self.poll, pool, self.login, sorted(self.jobs))
                    failures = 0
                    self.states.update(states)
                except (RemoteError, OSError) as exc:
                    failures += 1
                    if failures >= self.max_failures:
                        self.error = f"squeue/sacct on {self.login} failed {failures} times in a row: {exc}"
                self.rounds += 1
                tick, self._tick = self._tick, asyncio.Event()
                tick.set()
                if self.error:
                    return
                await asyncio.sleep(self.poll_s)
        finally:
            if self._task is asyncio.current_task():  # a watcher coming after this starts a new loop
                self._task = None
                if not self.jobs and self.key is not None and _POLLERS.get(self.key) is self:
                    del _POLLERS[self.key]
            await asyncio.to_thread(pool.close)
