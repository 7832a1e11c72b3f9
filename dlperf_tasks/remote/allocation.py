"""Exclusive node leases that hold across processes AND machines.

A lease is the directory ``<node workdir>/.lease`` on the node itself, created with an
atomic ``mkdir`` over SSH, holding ``owner`` / ``run_id`` / ``token`` / ``expires`` files.
Every lease operation on a node runs under ``flock <workdir>/.lease.lock`` on that node, so
"check expiry, take over" cannot race between two controllers. A lease whose ``expires``
(node clock, epoch seconds) lies in the past is stale and may be taken over. Holders renew
their leases in a background thread (every ttl/3) and release them in ``finally``.

    with Leases(pool, ["node1", "node2"], run_id="r1", ttl_s=120) as held:
        ...  # held == ["node1", "node2"] (or raises NodeBusy)
"""

from __future__ import annotations

import getpass
import os
import secrets
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.ssh import SSHPool

ACQUIRE_SCRIPT = r"""
set -u
wd="$1"; token="$2"; owner="$3"; run="$4"; ttl="$5"
mkdir -p "$wd" || exit 4
exec 9>"$wd/.lease.lock"
flock -w 20 9 || exit 3
now=$(date +%s)
lease="$wd/.lease"
write() { printf %s "$token" > "$lease/token"; printf %s "$owner" > "$lease/owner"; printf %s "$run" > "$lease/run_id"; echo $((now + ttl)) > "$lease/expires"; }
if mkdir "$lease" 2>/dev/null; then write; echo ACQUIRED; exit 0; fi
cur=$(cat "$lease/token" 2>/dev/null || true)
if [ "$cur" = "$token" ]; then write; echo ACQUIRED; exit 0; fi
exp=$(cat "$lease/expires" 2>/dev/null || echo 0)
case "$exp" in ''|*[!0-9]*) exp=0;; esac
if [ "$exp" -lt "$now" ]; then
  prev=$(cat "$lease/owner" 2>/dev/null || true)
  rm -rf "$lease" && mkdir "$lease" && write && echo "TAKEN_OVER $prev" && exit 0
fi
echo "BUSY $(cat "$lease/owner" 2>/dev/null) run=$(cat "$lease/run_id" 2>/dev/null) expires_in=$((exp - now))s"
exit 1
"""

RENEW_SCRIPT = r"""
set -u
wd="$1"; token="$2"; ttl="$3"
exec 9>"$wd/.lease.lock"
flock -w 20 9 || exit 3
lease="$wd/.lease"
[ "$(cat "$lease/token" 2>/dev/null)" = "$token" ] || { echo LOST; exit 1; }
echo $(( $(date +%s) + ttl )) > "$lease/expires"; echo RENEWED
"""

RELEASE_SCRIPT = r"""
set -u
wd="$1"; token="$2"
exec 9>"$wd/.lease.lock"
flock -w 20 9 || exit 3
lease="$wd/.lease"
if [ "$(cat "$lease/token" 2>/dev/null)" = "$token" ]; then rm -rf "$lease"; echo RELEASED; else echo NOT_OURS; fi
"""


RELEASE_RUN_SCRIPT = r"""
set -u
wd="$1"; run="$2"
[ -d "$wd" ] || exit 0
exec 9>"$wd/.lease.lock"
flock -w 20 9 || exit 3
if [ -d "$wd/.lease" ] && [ "$(cat "$wd/.lease/run_id" 2>/dev/null)" = "$run" ]; then rm -rf "$wd/.lease"; echo RELEASED; fi
"""


class NodeBusy(RemoteError):
    """The node is leased by someone else."""


def _script(script: str, *args: str) -> str:
    return "bash -c " + shlex.quote(script) + " dlperf-lease " + " ".join(shlex.quote(a) for a in args)


def default_owner() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001
        user = "?"
    return f"{user}@{socket.gethostname()}:{os.getpid()}"


@dataclass
class Lease:
    node: str
    token: str
    run_id: str
    taken_over_from: str | None = None

    def to_doc(self) -> dict[str, str]:
        """Plain data (a started trial's state, a trigger's kwargs): enough to renew and release."""
        return {"node": self.node, "token": self.token, "run_id": self.run_id}

    @classmethod
    def from_doc(cls, doc: Mapping[str, str]) -> "Lease":
        return cls(doc["node"], doc["token"], doc["run_id"])


def acquire(pool: SSHPool, node: str, run_id: str, ttl_s: int = 120, owner: str | None = None,
            token: str | None = None) -> Lease:
    """Take the node's lease or raise :class:`NodeBusy` (naming the holder)."""
    wd = pool.cluster.node(node).workdir
    token = token or secrets.token_hex(16)
    res = pool.run(node, _script(ACQUIRE_SCRIPT, wd, token, owner or default_owner(), run_id, str(int(ttl_s))),
                   timeout=40)
    first = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
    if res.rc == 0 and first.startswith(("ACQUIRED", "TAKEN_OVER")):
        prev = first.split(" ", 1)[1] if first.startswith("TAKEN_OVER") and " " in first else None
        return Lease(node, token, run_id, prev)
    if res.rc == 1 and first.startswith("BUSY"):
        raise NodeBusy(f"node {node} is leased by another sweep ({first[5:]})", node=node)
    raise RemoteError(f"node {node}: lease operation failed (exit {res.rc}): {res.stderr.strip()[-300:]}", node=node)


def renew(pool: SSHPool, lease: Lease, ttl_s: int) -> bool:
    wd = pool.cluster.node(lease.node).workdir
    res = pool.run(lease.node, _script(RENEW_SCRIPT, wd, lease.token, str(int(ttl_s))), timeout=40)
    return res.rc == 0


def renew_all(pool: SSHPool, docs, ttl_s: float) -> list[str]:
    """Renew leases given as :meth:`Lease.to_doc` dicts to ``ttl_s`` from now; returns the nodes
    whose renewal was refused (the lease is someone else's now). An unreachable node is skipped:
    the next renewal tries again, and the watch's error rule judges the node."""
    lost = []
    for doc in docs or []:
        try:
            if not renew(pool, Lease.from_doc(doc), int(ttl_s)):
                lost.append(doc["node"])
        except RemoteError:
            pass
    return lost


def release_all(pool: SSHPool, docs) -> dict[str, str]:
    """Release leases given as dicts; returns node -> why for those not released (unreachable:
    their lease expires by itself)."""
    failed = {}
    for doc in docs or []:
        try:
            release(pool, Lease.from_doc(doc))
        except RemoteError as exc:
            failed[doc["node"]] = str(exc)
    return failed


def holder(pool: SSHPool, node: str) -> str:
    """Who holds the node's lease now (``owner run_id``), or '' when it is free."""
    wd = shlex.quote(pool.cluster.node(node).workdir.rstrip("/"))
    res = pool.run(node, f"cat {wd}/.lease/owner {wd}/.lease/run_id 2>/dev/null | tr '\\n' ' '", timeout=30)
    return res.stdout.strip()


def release_run(pool: SSHPool, node: str, run_id: str) -> bool:
    """Release the node's lease if run ``run_id`` still holds it, whatever the token (a trial
    process killed hard cannot release its own)."""
    wd = pool.cluster.node(node).workdir.rstrip("/")
    return "RELEASED" in pool.run(node, _script(RELEASE_RUN_SCRIPT, wd, run_id), timeout=60).stdout


def lease_group(pool: SSHPool, candidates: list[str], count: int, run_id: str, *, wait_s: float,
                stop: threading.Event, ttl_s: int = 120) -> "list[Leases] | str":
    """Lease ``count`` of ``candidates`` (tried in order: node rank 0 first), one Leases per node;
    while they are held by other runs, retry after a random back-off (two waiting runs do not
    lock-step) until ``wait_s`` has passed or ``stop`` is set. Returns the held leases, or the
    reason none could be had (naming the holders); the caller releases them."""
    deadline = time.monotonic() + wait_s
    busy: dict[str, str] = {}
    while not stop.is_set():
        held: list[Leases] = []
        for name in candidates:
            lease = Leases(pool, [name], run_id, ttl_s=ttl_s)
            try:
                lease.acquire()
            except RemoteError as exc:  # leased by another run, or unreachable
                busy[name] = str(exc)
                continue
            held.append(lease)
            if len(held) == count:
                return held
        for lease in held:
            lease.release()
        if time.monotonic() > deadline:
            return f"no {count} free node(s) within {wait_s:.0f} s: " + "; ".join(busy.values())
        stop.wait(2.0 + secrets.randbelow(3000) / 1000)
    return "stopped while waiting for free nodes"


def release(pool: SSHPool, lease: Lease) -> bool:
    wd = pool.cluster.node(lease.node).workdir
    res = pool.run(lease.node, _script(RELEASE_SCRIPT, wd, lease.token), timeout=40)
    return "RELEASED" in res.stdout


class Leases:
    """Hold leases on some nodes for a sweep's lifetime (renewed in the background).

    ``want`` nodes are tried in order; ``min_nodes`` of them must be obtained (else all taken
    ones are released and, with ``wait_s`` > 0, the attempt is repeated after a random back-off,
    so two sweeps never deadlock holding half a cluster each).
    """

    def __init__(self, pool: SSHPool, want: list[str], run_id: str, *, min_nodes: int | None = None,
                 ttl_s: int = 120, wait_s: float = 0.0, owner: str | None = None, on_wait=None):
        self.pool, self.want, self.run_id = pool, list(want), run_id
        self.min_nodes = len(want) if min_nodes is None else min_nodes
        self.ttl_s, self.wait_s, self.owner = ttl_s, wait_s, owner or default_owner()
        self.on_wait = on_wait
        self.held: dict[str, Lease] = {}
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.busy_reasons: dict[str, str] = {}

    @property
    def nodes(self) -> list[str]:
        return [n for n in self.want if n in self.held]

    def _try_once(self) -> bool:
        self.busy_reasons.clear()
        for n in self.want:
            if n in self.held:
                continue
            try:
                self.held[n] = acquire(self.pool, n, self.run_id, self.ttl_s, self.owner)
            except NodeBusy as exc:
                self.busy_reasons[n] = str(exc)
            except RemoteError as exc:
                self.busy_reasons[n] = str(exc)
        return len(self.held) >= self.min_nodes

    def acquire(self) -> list[str]:
        deadline = time.monotonic() + self.wait_s
        while True:
            if self._try_once():
                break
            self.release()
            if time.monotonic() >= deadline:
                why = "; ".join(self.busy_reasons.values()) or "no node free"
                raise NodeBusy(f"could not lease {self.min_nodes} of the nodes {', '.join(self.want)}: {why}")
            if self.on_wait:
                self.on_wait(self.busy_reasons)
            time.sleep(min(max(0.0, deadline - time.monotonic()), 1.0 + secrets.randbelow(1000) / 1000))
        self._thread = threading.Thread(target=self._renew_loop, name="dlperf-lease-renew", daemon=True)
        self._thread.start()
        return self.nodes

    def _renew_loop(self) -> None:
        while not self._stop.wait(max(1.0, self.ttl_s / 3)):
            for n, lease in list(self.held.items()):
                try:
                    if not renew(self.pool, lease, self.ttl_s):
                        self.lost.append(n)
                except RemoteError:
                    pass  # try again next round; a node that stays away will expire

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for n, lease in list(self.held.items()):
            try:
                release(self.pool, lease)
            except RemoteError:
                pass  # unreachable: the lease expires by itself
            self.held.pop(n, None)
        self._stop = threading.Event()

    def detach(self) -> list[Lease]:
        """Stop renewing and hand the held leases over without releasing them: a trial whose
        jobs are watched elsewhere (a deferred task's trigger) renews them there
        (:func:`dlperf_tasks.remote.jobpoll.renew_leases`) and releases them with :func:`release`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        held, self.held = list(self.held.values()), {}
        self._stop = threading.Event()
        return held

    def __enter__(self) -> list[str]:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
