"""Checks of a Slurm cluster file against the cluster itself, run on a login node over SSH.

``run_checks`` is what ``dlperf cluster check`` prints for a Slurm cluster: one line per finding,
each naming the inventory field it is about (``slurm.partition``, ``slurm.account``...):

* the login host(s) answer over SSH and have the Slurm client tools;
* ``sinfo`` knows the partition, its nodes carry the ``gpu`` gres the file promises
  (``gpus_per_node``), and which nodes are down, drained or not responding (named, not fatal);
* the account, QoS and reservation exist and the user may use them (``sacctmgr`` when the
  cluster keeps accounting; otherwise the line says they were not checked);
* the shared work directory exists and is writable from the login node;
* the container mode works: one tiny ``srun`` with the mode's flags (pyxis: ``--container-image``
  of ``check_image``; apptainer/singularity: the tool on a compute node; none: a plain step).

``validate_before_submit`` is the part a sweep runs before it submits anything: a bad partition,
account, QoS or reservation is ONE error line naming the field and the file (``RemoteError``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote import slurm_jobs
from dlperf_tasks.remote.slurm_inventory import SlurmCluster, enroot_uri

_IMMEDIATE_S = 60            # a check step waits at most this long for a node


@dataclass(frozen=True)
class Finding:
    ok: bool          # False: a problem (the check fails)
    field: str        # the inventory field (or "login", "nodes") the line is about
    text: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.field}: {self.text}"


def _one_line(text: str, limit: int = 300, about: str = "") -> str:
    """The lines that say why (the first naming ``about``, e.g. ``pyxis:``, an error or failure first: pyxis
    prints ``pyxis: importing docker image: ...`` before it fails, then the last) as one line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    named = [ln for ln in lines if about and about in ln]
    named = ([ln for ln in named if "error" in ln.lower() or "fail" in ln.lower()] or named)[:1]
    picked = named + [ln for ln in lines[-1:] if ln not in named] if named else lines[-2:]
    out = " | ".join(picked) if picked else "(no output)"
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _run(pool, login: str, command: str, timeout: float = 60):
    return pool.run(login, command, timeout=timeout)


def partition_findings(cluster: SlurmCluster, pool, login: str) -> list[Finding]:
    s = cluster.slurm
    out = _run(pool, login, "sinfo -h -a -o '%R'")
    if not out.ok:
        return [Finding(False, "slurm.partition", f"sinfo failed on the login node: {_one_line(out.stderr)}")]
    known = sorted(set(out.stdout.split()))
    if s.partition not in known:
        return [Finding(False, "slurm.partition", f"partition {s.partition!r} does not exist on the cluster "
                                                  f"(sinfo lists: {', '.join(known) or 'none'})")]
    rows = slurm_jobs.parse_partition_nodes(_run(pool, login, slurm_jobs.partition_nodes_command(s.partition)).stdout)
    nodes = {r.name: r for r in rows}
    found = [Finding(True, "slurm.partition", f"{s.partition}: {len(nodes)} node(s)")]
    short = sorted(n for n, r in nodes.items() if r.gpus < s.gpus_per_node)
    if s.gpus_per_node and short:
        have = ", ".join(f"{n} gpu:{nodes[n].gpus}" for n in short[:8])
        found.append(Finding(False, "slurm.gpus_per_node", f"{s.gpus_per_node}, but partition {s.partition} has "
                                                           f"nodes with fewer GPUs (gres): {have}"))
    elif s.gpus_per_node and nodes:
        found.append(Finding(True, "slurm.gpus_per_node", f"{s.gpus_per_node}: every node has gres gpu:"
                                                          f"{min(r.gpus for r in nodes.values())} or more"))
    bad = {n: r for n, r in nodes.items() if not r.usable}
    for n, r in sorted(bad.items()):
        found.append(Finding(True, "nodes", slurm_jobs.node_note(n, r.state, r.reason)
                             + ": Slurm will not place trials there"))
    if nodes and len(bad) == len(nodes):
        found.append(Finding(False, "nodes", f"no node of partition {s.partition} is usable"))
    return found


def _accounting(pool, login: str) -> str:
    out = _run(pool, login, "scontrol show config")
    m = re.search(r"^AccountingStorageType\s*=\s*(\S+)", out.stdout, re.M)
    return m.group(1) if m else "unknown"


def account_findings(cluster: SlurmCluster, pool, login: str) -> list[Finding]:
    s = cluster.slurm
    if not s.account and not s.qos:
        return [Finding(True, "slurm.account", "not set: jobs use the user's default account and QoS")]
    storage = _accounting(pool, login)
    if "slurmdbd" not in storage:
        return [Finding(True, "slurm.account", f"not checked: the cluster keeps no accounting "
                                               f"(AccountingStorageType={storage}); Slurm accepts any name")]
    found: list[Finding] = []
    user = "\"$(id -un)\""
    assoc_cmd = f"sacctmgr -n -P show assoc where user={user} format=Account,QOS"
    if s.account:
        assoc_cmd = f"sacctmgr -n -P show assoc where user={user} account={shlex.quote(s.account)} format=Account,QOS"
    rows = [ln.split("|") for ln in _run(pool, login, assoc_cmd).stdout.splitlines() if "|" in ln]
    if s.account:
        if not rows:
            exists = _run(pool, login, f"sacctmgr -n -P show account {shlex.quote(s.account)} format=Account").stdout
            why = "is not one of the user's accounts" if exists.strip() else "does not exist on the cluster"
            return [Finding(False, "slurm.account", f"account {s.account!r} {why}")]
        found.append(Finding(True, "slurm.account", f"{s.account}: the user may submit with it"))
    if s.qos:
        allowed = sorted({q for row in rows for q in row[1].split(",") if q})
        if s.qos not in allowed:
            exists = _run(pool, login, f"sacctmgr -n -P show qos {shlex.quote(s.qos)} format=Name").stdout
            where = f"account {s.account}" if s.account else "the user"
            why = (f"is not allowed for {where} (allowed: {', '.join(allowed) or 'none'})" if exists.strip()
                   else "does not exist on the cluster")
            found.append(Finding(False, "slurm.qos", f"QoS {s.qos!r} {why}"))
        else:
            found.append(Finding(True, "slurm.qos", f"{s.qos}: allowed"))
    return found


def reservation_findings(cluster: SlurmCluster, pool, login: str) -> list[Finding]:
    r = cluster.slurm.reservation
    if not r:
        return []
    out = _run(pool, login, f"scontrol -o show reservation {shlex.quote(r)}")
    if not out.ok or f"ReservationName={r} " not in out.stdout + " ":
        return [Finding(False, "slurm.reservation", f"reservation {r!r} does not exist on the cluster")]
    return [Finding(True, "slurm.reservation", f"{r}: exists")]


def workdir_findings(cluster: SlurmCluster, pool, login: str) -> list[Finding]:
    w = cluster.slurm.work_dir
    out = _run(pool, login, f"test -d {shlex.quote(w)} && test -w {shlex.quote(w)}")
    if not out.ok:
        return [Finding(False, "slurm.work_dir", f"{w} is not a writable directory on the login node")]
    return [Finding(True, "slurm.work_dir", f"{w}: writable")]


def container_step(cluster: SlurmCluster, image: str | None) -> tuple[str | None, str]:
    """The check's srun line for the container mode (None when it cannot be built) and what it tests."""
    s = cluster.slurm
    opts = [o for o in s.sbatch_options() if not o.startswith("--time=")]
    base = ["srun", *opts, "--time=2", f"--immediate={_IMMEDIATE_S}", "-N1", "-n1", "-J", "dlperf-check"]
    if s.gpus_per_node:
        base.append(f"--gpus-per-node={s.gpus_per_node}")
    if s.container == "pyxis":
        image = cluster.resolve_image(image or s.check_image or (cluster.images[0] if cluster.images else None))
        if not image:
            return None, "no image to try: set slurm.check_image (or pass --image)"
        argv = [*base, f"--container-image={enroot_uri(image)}", "--no-container-mount-home", "true"]
        what = f"a step in {enroot_uri(image)} through pyxis"
    elif s.container in ("apptainer", "singularity"):
        argv, what = [*base, s.container, "--version"], f"{s.container} on a compute node"
    else:
        argv, what = [*base, "true"], "a plain step"
    return f"cd {shlex.quote(s.work_dir)} && " + " ".join(shlex.quote(a) for a in argv), what


def container_findings(cluster: SlurmCluster, pool, login: str, image: str | None = None) -> list[Finding]:
    field = f"slurm.container ({cluster.slurm.container})"
    command, what = container_step(cluster, image)
    if command is None:
        return [Finding(False, field, f"not checked: {what}")]
    out = _run(pool, login, command, timeout=_IMMEDIATE_S + 120)
    if out.ok:
        return [Finding(True, field, f"{what}: ran")]
    if "Unable to allocate resources" in out.stderr and ("busy" in out.stderr or "immediate" in out.stderr):
        return [Finding(False, field, f"not checked: no node of partition {cluster.slurm.partition} "
                                      f"was free within {_IMMEDIATE_S} s")]
    about = f"{cluster.slurm.container}:" if cluster.slurm.container != "none" else ""
    return [Finding(False, field, f"{what} failed (exit {out.rc}): {_one_line(out.stderr or out.stdout, about=about)}")]


def login_findings(cluster: SlurmCluster, pool) -> tuple[str | None, list[Finding]]:
    """Try each login host; the first that answers with Slurm's tools is used for the rest."""
    found: list[Finding] = []
    chosen: str | None = None
    for node in cluster.login:
        try:
            out = pool.run(node.name, "sinfo --version", timeout=30)
        except RemoteError as exc:
            found.append(Finding(False, "login", f"{node.name}: {exc}"))
            continue
        if not out.ok:
            found.append(Finding(False, "login", f"{node.name}: reachable, but sinfo does not run there: "
                                                 f"{_one_line(out.stderr or out.stdout)}"))
            continue
        found.append(Finding(True, "login", f"{node.name}: reachable ({out.stdout.strip()})"))
        chosen = chosen or node.name
    return chosen, found


def run_checks(cluster: SlurmCluster, pool, image: str | None = None) -> list[Finding]:
    """Every check, in order; the container step runs only when nothing before it failed (a bad
    partition or account must not reach sbatch/srun)."""
    login, found = login_findings(cluster, pool)
    if login is None:
        return found
    for step in (partition_findings, account_findings, reservation_findings, workdir_findings):
        found += step(cluster, pool, login)
    if all(f.ok for f in found):
        found += container_findings(cluster, pool, login, image)
    return found


def validate_before_submit(cluster: SlurmCluster, pool, login: str | None = None) -> None:
    """Raise ONE RemoteError naming the file and field when the partition, account, QoS or
    reservation would be refused; nothing is submitted."""
    login = login or cluster.login_names[0]
    for step in (partition_findings, account_findings, reservation_findings):
        for f in step(cluster, pool, login):
            if not f.ok:
                raise RemoteError(f"{cluster.source or cluster.name}: {f.field}: {f.text}")
