"""Container runtime: registry login, image pull, the trial's ``docker run`` and cleanup.

Two runtimes share one interface:

* :class:`DockerRuntime` - the seeds' ``docker run`` flags (``--shm-size``, ``--ulimit memlock=-1``,
  ``--net=host``, ``--ipc=host``, ``--gpus all`` only where the node has the nvidia runtime,
  ``/dev/infiniband`` only where it exists, ``--privileged`` only when the suite asks), labels
  ``dlperf.run``/``dlperf.trial``/``dlperf.node`` on every container so cleanup finds them.
* :class:`HostRuntime` - runs the launch command directly on the node (no container).

Launch modes (``Framework.launch_mode``): ``per_node`` = one container per node running that
node's :class:`LaunchSpec`; ``mpi`` = every node runs a helper container with sshd on
``ContainerSpec.sshd_port`` (or the inventory's ``mpi_ssh_port``; bound to the node's peer
address) and a launcher container on node 0 runs ``mpirun``. The helper containers trust a key pair generated per run (never reused).

Every command string is built here from argv lists with :func:`shlex.join`. Secrets never reach a
command line nor a file on the node: the registry login and pull go through the Docker SDK over the
node's SSH connection with the credentials inside the API request (:mod:`dlperf_tasks.remote.engine`); suite and launcher env values travel in the
detached job's 0600 env file (:mod:`dlperf_tasks.remote.jobs`), which the job hands to
``docker run --env-file /dev/stdin`` and deletes before docker starts.
"""

from __future__ import annotations

import hashlib
import shlex
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.frameworks.base import LaunchSpec
from dlperf_tasks.core.model import Trial
# the builders are re-exported here: callers and tests use ``runtime.<builder>``
from dlperf_tasks.remote.dockercmd import (CONTAINER_LOG_DIR, LABEL_NODE, LABEL_RUN, LABEL_TRIAL,  # noqa: F401
                                           LEFTOVER_REGISTRY_CONFIG_CLEANUP, TRIAL_ENV,
                                           NodeFacts, _sections, docker_env_file, docker_run_argv, expand,
                                           image_inspect_command, label_filter_args, list_containers_command,
                                           optional_flags, parse_digest, probe_command, pull_command,
                                           remove_containers_command, safe_name,
                                           trial_process_check_command)
from dlperf_tasks.remote.inventory import Node, Registry
from dlperf_tasks.remote.jobs import JobCommand
from dlperf_tasks.remote.ssh import SSHPool
from dlperf_tasks.catalog.validate import check_image_ref
from dlperf_tasks.remote import engine

# ---- runtimes --------------------------------------------------------------------------
class HostRuntime:
    """Runs the launch command on the node itself (suite ``container: null``)."""

    kind = "host"
    image = None

    def prepare(self, pool: SSHPool, nodes: list[str]) -> dict[str, NodeFacts]:
        out = {}
        for n in nodes:
            res = pool.run(n, probe_command(), timeout=30)
            out[n] = NodeFacts(n, docker="docker=1" in res.stdout, nvidia_runtime="nvidia=1" in res.stdout,
                               infiniband="ib=1" in res.stdout)
        return out

    def node_command(self, spec: LaunchSpec, *, trial: Trial, run_id: str, node: Node, node_rank: int,
                     facts: NodeFacts, log_dir: str, attempt: int = 1) -> JobCommand:
        env = dict(spec.env)
        env[TRIAL_ENV] = trial.key
        env["DLPERF_OUT"] = log_dir
        return JobCommand(list(spec.argv), env, cwd=spec.workdir, mkdirs=(log_dir,))

    def mpi_helpers(self, *a, **kw) -> list[str]:
        return []

    def verify_digest(self, pool: SSHPool, nodes: list[str], facts: Mapping[str, NodeFacts]) -> None:
        """No image on the host runtime: nothing to verify."""

    def cleanup(self, pool: SSHPool, node: str, run_id: str, trial_key: str | None = None) -> str:
        return ""

    def leftovers(self, pool: SSHPool, node: str, run_id: str, trial_key: str | None = None) -> list[str]:
        pids = pool.run(node, trial_process_check_command(trial_key), timeout=30).stdout.split()
        return [f"process {p}" for p in pids]

    def finish_command(self, run_id: str, trial_key: str, node: str, extra: str = "") -> str:
        return f"{extra + '; ' if extra else ''}echo @@procs; {trial_process_check_command(trial_key)}"

    def finish(self, pool: SSHPool, node: str, run_id: str, trial_key: str, extra: str = "") -> list[str]:
        """One round trip after a trial: remove its containers, run ``extra`` (e.g. remove the job
        directory), and return what is left (labelled containers, processes carrying DLPERF_TRIAL)."""
        out = _sections(pool.run(node, self.finish_command(run_id, trial_key, node, extra), timeout=120).stdout)
        return ([f"container {c}" for c in out.get("containers", [])]
                + [f"process {p}" for p in out.get("procs", [])])


class DigestMismatch(RemoteError):
    """A node holds another image than the digest the catalog pins: the trial is refused."""


class DockerRuntime(HostRuntime):
    kind = "docker"

    def __init__(self, spec: ContainerSpec, image: str | None = None, registry: Registry | None = None,
                 sshd_command: list[str] | None = None, ssh_port: int | None = None):
        self.spec = spec
        self.ssh_port = int(ssh_port or spec.sshd_port or 22)
        # the catalog's pinned digest: pulled by digest and checked on every node; it pins the
        # catalog's tag, also through a site mirror (same tag), not another tag (conf image_tag)
        self.pinned_digest = spec.pinned_for(image)
        self.image = spec.pinned_ref(image)
        self.registry = registry
        self.sshd_command = sshd_command
        self._mpi_key: tuple[str, str] | None = None

    # ---- preparation ---------------------------------------------------------------
    def pull(self, pool: SSHPool, node: str, facts: NodeFacts) -> None:
        """Log in (when the inventory names a registry) and pull the image unless the node has it.
        With a registry, the login and pull go through the node's engine API over SSH with the
        credentials inside the request (:func:`engine.registry_pull`): nothing is written on the node."""
        reg = self.registry
        if reg is None:
            res = pool.run(node, image_inspect_command(self.image), timeout=60)
            if res.rc != 0:
                pr = pool.run(node, pull_command(self.image), timeout=3600)
                if pr.rc != 0:
                    raise RemoteError(f"node {node}: docker pull {self.image} failed: {pr.stderr.strip()[-400:]}",
                                      node=node)
                facts.pulled = True
                res = pool.run(node, image_inspect_command(self.image), timeout=60, check=True)
            facts.image_digest = parse_digest(res.stdout, self.image)
            self.check_pinned(node, facts.image_digest)
            return
        password = reg.resolve_password()
        if not password:
            raise RemoteError(f"registry {reg.server}: no password (set the environment variable "
                              f"{reg.password_env or '<password_env>'} or the connection's password)", node=node)

        facts.pulled, line = engine.registry_pull(pool, node, self.image, server=reg.server,
                                                  username=reg.resolve_username(), password=password)
        facts.image_digest = parse_digest(line, self.image)
        self.check_pinned(node, facts.image_digest)

    def check_pinned(self, node: str, seen: str | None) -> None:
        """Refuse the trial when the node's image is not the digest the catalog pins."""
        if not self.pinned_digest:
            return
        got = (seen or "").rpartition("@")[2]
        if got != self.pinned_digest:
            raise RemoteError(f"node {node}: image {self.image} has digest {got or '(none)'}, the catalog pins "
                              f"{self.pinned_digest}: trial refused (a retagged or rebuilt image)", node=node)

    def verify_digest(self, pool: SSHPool, nodes: list[str], facts: Mapping[str, NodeFacts]) -> None:
        """At a trial's start: the digest of the image each node holds now goes into its facts (the
        trial records it); a node whose image is not the pinned digest refuses the trial
        (:class:`DigestMismatch`). Without a pinned digest nothing is asked."""
        if not self.pinned_digest:
            return

        def one(node: str) -> None:
            res = pool.run(node, image_inspect_command(self.image), timeout=60)
            seen = parse_digest(res.stdout, self.image) if res.rc == 0 else None
            if node in facts:
                facts[node].image_digest = seen
            try:
                self.check_pinned(node, seen)
            except RemoteError as exc:
                raise DigestMismatch(str(exc), node=node) from None

        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
            list(ex.map(one, nodes))

    def probe_flags(self, pool: SSHPool, node: str, facts: NodeFacts) -> None:
        """Start a throwaway container per optional suite flag (ulimits, caps, devices, privileged); a flag the
        runtime refuses with "operation not permitted" (unprivileged sandboxes such as the simulated
        cluster) is dropped on this node and noted in the env capture. Nothing is dropped on a normal host."""
        flags = optional_flags(self.spec, facts)
        if not flags:
            return
        all_cmd = shlex.join(["docker", "run", "--rm", *[w for f in flags for w in f.split(" ", 1)],
                              "--entrypoint", "true", self.image])
        if pool.run(node, all_cmd, timeout=120).rc == 0:
            return
        for flag in flags:
            cmd = shlex.join(["docker", "run", "--rm", *flag.split(" ", 1), "--entrypoint", "true", self.image])
            res = pool.run(node, cmd, timeout=120)
            if res.rc != 0 and "not permitted" in res.stderr:
                facts.dropped_flags.append(flag)
                facts.notes.append(f"{flag} refused by the container runtime on {node} (operation not permitted); "
                                   f"running without it")

    def prepare(self, pool: SSHPool, nodes: list[str]) -> dict[str, NodeFacts]:
        """Probe, log in and pull on all nodes in parallel; raises the first node's error."""

        def one(n: str) -> NodeFacts:
            facts = super(DockerRuntime, self).prepare(pool, [n])[n]
            if not facts.docker:
                raise RemoteError(f"node {n}: docker is not usable (not installed or daemon not running)", node=n)
            self.pull(pool, n, facts)
            self.probe_flags(pool, n, facts)
            return facts

        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
            futs = {n: ex.submit(one, n) for n in nodes}
            out, errors = {}, []
            for n, f in futs.items():
                try:
                    out[n] = f.result()
                except RemoteError as exc:
                    errors.append(exc)
        if errors:
            first = errors[0]
            more = f" (and {len(errors) - 1} more node(s))" if len(errors) > 1 else ""
            raise RemoteError(str(first) + more, node=first.node)
        return out

    # ---- trial commands ----------------------------------------------------------------
    def container_name(self, run_id: str, trial: Trial, node: str, attempt: int, role: str = "rank") -> str:
        # the run id is cut to stay readable; its hash keeps two runs started close together apart
        run_tag = hashlib.sha1(run_id.encode()).hexdigest()[:8]
        return safe_name(f"dlperf-{safe_name(run_id, 24)}-{run_tag}-{trial.key}-{node}-{role}-a{attempt}", 128)

    def labels(self, run_id: str, trial: Trial, node: str) -> dict[str, str]:
        return {LABEL_RUN: run_id, LABEL_TRIAL: trial.key, LABEL_NODE: node}

    def node_command(self, spec: LaunchSpec, *, trial: Trial, run_id: str, node: Node, node_rank: int,
                     facts: NodeFacts, log_dir: str, attempt: int = 1, mpi_key_dir: str | None = None) -> JobCommand:
        env = dict(spec.env)
        env[TRIAL_ENV] = trial.key
        env["DLPERF_OUT"] = CONTAINER_LOG_DIR
        mounts = [f"{mpi_key_dir}:/root/.ssh:ro"] if mpi_key_dir else []
        argv = docker_run_argv(self.spec, self.image, self.container_name(run_id, trial, node.name, attempt),
                               self.labels(run_id, trial, node.name), node=node, facts=facts,
                               env_file="/dev/stdin", workdir=spec.workdir, command=spec.argv, log_dir=log_dir,
                               extra_mounts=mounts)
        # the docker client itself carries DLPERF_TRIAL too (the leftover scan looks for it)
        return JobCommand(argv, {TRIAL_ENV: trial.key}, mkdirs=(log_dir,), stdin=docker_env_file(env))

    def mpi_key_files(self) -> dict[str, bytes]:
        """Files for ``/root/.ssh`` inside the MPI containers: a fresh per-run key pair."""
        if self._mpi_key is None:
            from cryptography.hazmat.primitives import serialization
            from cryptography.hazmat.primitives.asymmetric import ed25519

            k = ed25519.Ed25519PrivateKey.generate()
            priv = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                   serialization.NoEncryption()).decode()
            pub = k.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                              serialization.PublicFormat.OpenSSH).decode()
            self._mpi_key = (priv, pub + " dlperf-mpi\n")
        priv, pub = self._mpi_key
        port = self.ssh_port
        cfg = f"Host *\n  Port {port}\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        return {"id_ed25519": priv.encode(), "id_ed25519.pub": pub.encode(), "authorized_keys": pub.encode(),
                "config": cfg.encode()}

    def install_mpi_keys(self, pool: SSHPool, node: str, key_dir: str) -> None:
        pool.run(node, f"mkdir -p {shlex.quote(key_dir)} && chmod 700 {shlex.quote(key_dir)}", timeout=30, check=True)
        for fname, data in self.mpi_key_files().items():
            pool.put_bytes(node, f"{key_dir}/{fname}", data, 0o600)

    def sshd_argv(self, node: Node) -> list[str]:
        """sshd in the foreground on the MPI port, bound to the node's peer address (several simulated
        nodes may share one host network). ``launcher.sshd_command`` may replace it ({port}, {address})."""
        port = str(self.ssh_port)
        if self.sshd_command:
            return [a.replace("{port}", port).replace("{address}", node.peer_address) for a in self.sshd_command]
        return ["sh", "-c", 'mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -p "$0" -o ListenAddress="$1"',
                port, node.peer_address]

    def mpi_helper_command(self, *, trial: Trial, run_id: str, node: Node, facts: NodeFacts, log_dir: str,
                           key_dir: str, attempt: int = 1, prelude: list[str] | None = None) -> str:
        """Detached helper container running sshd for mpirun (on every node of the trial); ``prelude``
        (the source-patch applier's words, catalog/patches.py) runs before sshd in the container."""
        argv = docker_run_argv(self.spec, self.image, self.container_name(run_id, trial, node.name, attempt, "sshd"),
                               self.labels(run_id, trial, node.name), node=node, facts=facts, env_file=None,
                               marker_env=f"{TRIAL_ENV}={trial.key}",
                               workdir=None, command=[*(prelude or []), *self.sshd_argv(node)], log_dir=log_dir,
                               detach=True,
                               extra_mounts=[f"{key_dir}:/root/.ssh:ro"])
        return f"mkdir -p {shlex.quote(log_dir)} && " + shlex.join(argv)

    # ---- cleanup ----------------------------------------------------------------------
    def cleanup(self, pool: SSHPool, node: str, run_id: str, trial_key: str | None = None) -> str:
        """Remove this node's containers of the run (or of one trial)."""
        return pool.run(node, remove_containers_command(run_id, trial_key, node), timeout=120).stdout

    def leftovers(self, pool: SSHPool, node: str, run_id: str, trial_key: str | None = None) -> list[str]:
        ids = pool.run(node, list_containers_command(run_id, trial_key, node), timeout=60).stdout.split()
        return [f"container {i}" for i in ids] + super().leftovers(pool, node, run_id, trial_key)

    def finish_command(self, run_id: str, trial_key: str, node: str, extra: str = "") -> str:
        ls = list_containers_command(run_id, trial_key, node)
        # list once; remove and list again only when something is there (the usual --rm case: nothing)
        return (f'ids="$({ls})"; if [ -n "$ids" ]; then docker rm -f $ids >/dev/null 2>&1; ids="$({ls})"; fi; '
                f"{extra + '; ' if extra else ''}echo @@containers; echo \"$ids\"; "
                f"echo @@procs; {trial_process_check_command(trial_key)}")


def make_runtime(container: ContainerSpec | None, image: str | None = None, registry: Registry | None = None,
                 launcher: Mapping | None = None, ssh_port: int | None = None) -> HostRuntime:
    """The suite's runtime; ``ssh_port`` (from the inventory's ``mpi_ssh_port``) overrides the suite's sshd port."""
    if container is None:
        return HostRuntime()

    check_image_ref(image or container.image, "image")
    sshd_cmd = (launcher or {}).get("sshd_command")
    return DockerRuntime(container, image=image, registry=registry,
                         sshd_command=[str(a) for a in sshd_cmd] if sshd_cmd else None, ssh_port=ssh_port)
