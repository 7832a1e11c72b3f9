"""The "one failed rank ends the poll" rule of :func:`dlperf_tasks.remote.jobpoll.poll_once`
when the other node drops in that same moment: the verdict still comes back (exited, the failed
rank's status) instead of an SSH error escaping the poll (which lost the failure record in
process and killed the trigger on the deferred path). The node dropping between two reads of one
poll cannot be timed with real sshd nodes, so the pool here is a scripted stand-in for
``SSHPool.read`` (the real path: tests/integration/test_trial_trigger.py)."""

from __future__ import annotations

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.jobpoll import JobsWatch, poll_once
from dlperf_tasks.remote.jobs import JobPaths, RemoteJob


class DropsOnSecondStatusRead:
    """node1's job exited 3; node2's job runs, and node2 is unreachable from its second status read on."""

    def __init__(self):
        self.status_reads = {"node1": 0, "node2": 0}

    def read(self, node, path, offset=0, max_bytes=None):
        if path.endswith("/log"):
            return b""
        if path.endswith("/exit"):
            self.status_reads[node] += 1
            if node == "node2" and self.status_reads[node] > 1:
                raise RemoteError("node2: connection reset by peer")
            return b"3\n" if node == "node1" else None
        return None

    def run(self, *a, **kw):  # pragma: no cover - the rule must not need more
        raise AssertionError("poll_once ran a command where it only reads status")


def test_failed_rank_verdict_survives_the_other_node_dropping():
    jobs = [RemoteJob(n, JobPaths("j" + n[-1], "/tmp/dlperf-jobs")) for n in ("node1", "node2")]
    w = JobsWatch.of(jobs, timeout_s=600, hang_s=600)
    pool = DropsOnSecondStatusRead()
    v = poll_once(pool, w, now=w.started + 1)
    assert pool.status_reads == {"node1": 1, "node2": 2}  # node2's status was read once more
    assert v == {"status": "exited", "exit_codes": {"node1": 3, "node2": None},
                 "reason": "exit status {'node1': 3} on a node"}
