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

Every command string is built here from argv lists with :func:`shlex.join`; secrets (registry
password) travel over the SSH channel's stdin only.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import string
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping

from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.errors import RemoteError
from dlperf_tasks.frameworks.base import LaunchSpec
from dlperf_tasks.model import Trial
from dlperf_tasks.remote.inventory import Node, Registry
from dlperf_tasks.remote.ssh import SSHPool

LABEL_RUN = "dlperf.run"
LABEL_TRIAL = "dlperf.trial"
LABEL_NODE = "dlperf.node"
#: set in every trial process' environment so leftovers can be found in /proc on the node
TRIAL_ENV = "DLPERF_TRIAL"
CONTAINER_LOG_DIR = "/dlperf/out"


def safe_name(text: str, limit: int = 60) -> str:
    """A string usable in docker names and paths."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", text)[:limit].strip("-.") or "x"


@dataclass
class NodeFacts:
    """What a node offers (recorded in the run's env capture)."""

    name: str
    docker: bool = False
    nvidia_runtime: bool = False
    infiniband: bool = False
    image_digest: str | None = None
    pulled: bool = False
    #: suite flags the node's container runtime refuses with "operation not permitted" (e.g. ``--privileged``
    #: or ``--ulimit memlock=-1`` inside an unprivileged sandbox); dropped on that node and noted
    dropped_flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- pure command builders ------------------------------------------------------------
def login_command(registry: Registry) -> str:
    """``docker login`` reading the password from stdin (never on the command line)."""
    return shlex.join(["docker", "login", "--username", registry.resolve_username(), "--password-stdin",
                       registry.server])


def image_inspect_command(image: str) -> str:
    return shlex.join(["docker", "image", "inspect", "--format", "{{json .RepoDigests}} {{.Id}}", image])


def pull_command(image: str) -> str:
    return shlex.join(["docker", "pull", "--quiet", image])


def probe_command() -> str:
    """One round trip: docker present? nvidia runtime? /dev/infiniband?"""
    return ("if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo docker=1; "
            "docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia && echo nvidia=1; "
            "else echo docker=0; fi; test -e /dev/infiniband && echo ib=1; true")


def label_filter_args(run_id: str | None = None, trial_key: str | None = None, node: str | None = None) -> list[str]:
    args: list[str] = []
    if run_id:
        args += ["--filter", f"label={LABEL_RUN}={run_id}"]
    else:
        args += ["--filter", f"label={LABEL_RUN}"]
    if trial_key:
        args += ["--filter", f"label={LABEL_TRIAL}={trial_key}"]
    if node:
        args += ["--filter", f"label={LABEL_NODE}={node}"]
    return args


def list_containers_command(run_id: str | None = None, trial_key: str | None = None, node: str | None = None) -> str:
    return shlex.join(["docker", "ps", "-aq", *label_filter_args(run_id, trial_key, node)])


def remove_containers_command(run_id: str | None = None, trial_key: str | None = None, node: str | None = None) -> str:
    """Force-remove the labelled containers (prints the removed ids)."""
    ls = list_containers_command(run_id, trial_key, node)
    return f'ids="$({ls})"; if [ -n "$ids" ]; then docker rm -f $ids; fi'


def trial_process_check_command(trial_key: str | None = None) -> str:
    """PIDs on the node whose environment carries ``DLPERF_TRIAL[=<key>]`` (leftover trial processes).
    One ``grep -z`` over every /proc/<pid>/environ (entries are NUL-separated)."""
    pattern = f"^{TRIAL_ENV}={trial_key}$" if trial_key else f"^{TRIAL_ENV}="
    return (f"grep -lsz -- {shlex.quote(pattern)} /proc/[0-9]*/environ 2>/dev/null "
            "| sed -n 's#^/proc/\\([0-9]*\\)/environ$#\\1#p'; true")


def _sections(out: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    key = None
    for line in out.splitlines():
        if line.startswith("@@"):
            key = line[2:].strip()
            found[key] = []
        elif key and line.strip():
            found[key].append(line.strip())
    return found


def expand(text: str, values: Mapping[str, str], what: str) -> str:
    """``${data_dir}`` style placeholders from the inventory; unknown ones are an error."""
    try:
        return string.Template(text).substitute(values)
    except KeyError as exc:
        raise RemoteError(f"{what}: unknown placeholder ${{{exc.args[0]}}} in {text!r}; "
                          f"known: {', '.join(sorted(values))}") from None
    except ValueError as exc:
        raise RemoteError(f"{what}: bad placeholder in {text!r}: {exc}") from None


def optional_flags(spec: ContainerSpec, facts: NodeFacts) -> list[str]:
    """Flags a sandboxed container runtime may refuse, each one ``"--flag value"`` (split on the first space)."""
    flags = [f"--ulimit {u}" for u in spec.ulimits]
    flags += [f"--cap-add={cap}" for cap in (getattr(spec, "cap_add", ()) or ())]
    for dev in spec.devices:
        if dev == "/dev/infiniband" and not facts.infiniband:
            continue  # only where present on the node
        flags.append(f"--device={dev}")
    if spec.privileged:
        flags.append("--privileged")
    return flags


def docker_run_argv(spec: ContainerSpec, image: str, name: str, labels: Mapping[str, str], *, node: Node,
                    facts: NodeFacts, env: Mapping[str, str], workdir: str | None, command: list[str],
                    log_dir: str | None = None, detach: bool = False, extra_mounts: list[str] = ()) -> list[str]:
    """The full ``docker run`` argv (pure; tests check it as a list)."""
    argv = ["docker", "run", "--rm", "--name", name]
    if detach:
        argv.append("-d")
    for k, v in labels.items():
        argv += ["--label", f"{k}={v}"]
    if facts.nvidia_runtime:
        argv += ["--gpus", "all"]
    if spec.shm_size:
        argv.append(f"--shm-size={spec.shm_size}")
    for flag in optional_flags(spec, facts):
        if flag not in facts.dropped_flags:
            argv += flag.split(" ", 1)
    if spec.net_host:
        argv.append("--net=host")
    if spec.ipc_host:
        argv.append("--ipc=host")
    values = {"data_dir": node.data_dir or "", "workdir": node.workdir, "node": node.name}
    for m in list(spec.mounts) + list(node.mounts) + list(extra_mounts):
        argv += ["-v", expand(m, values, f"mount for node {node.name}")]
    if log_dir:
        argv += ["-v", f"{log_dir}:{CONTAINER_LOG_DIR}"]
    for k, v in env.items():
        argv += ["-e", f"{k}={v}"]
    if workdir:
        argv += ["-w", workdir]
    argv.append(image)
    argv += list(command)
    return argv


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
                     facts: NodeFacts, log_dir: str, attempt: int = 1) -> str:
        env = dict(spec.env)
        env[TRIAL_ENV] = trial.key
        env["DLPERF_OUT"] = log_dir
        return LaunchSpec(spec.argv, env, spec.workdir).shell()

    def mpi_helpers(self, *a, **kw) -> list[str]:
        return []

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


class DockerRuntime(HostRuntime):
    kind = "docker"

    def __init__(self, spec: ContainerSpec, image: str | None = None, registry: Registry | None = None,
                 sshd_command: list[str] | None = None, ssh_port: int | None = None):
        self.spec = spec
        self.ssh_port = int(ssh_port or spec.sshd_port or 22)
        self.image = image or spec.image
        self.registry = registry
        self.sshd_command = sshd_command
        self._mpi_key: tuple[str, str] | None = None

    # ---- preparation ---------------------------------------------------------------
    def login(self, pool: SSHPool, node: str) -> None:
        reg = self.registry
        if reg is None:
            return
        password = reg.resolve_password()
        if not password:
            raise RemoteError(f"registry {reg.server}: no password (set the environment variable "
                              f"{reg.password_env or '<password_env>'} or the connection's password)", node=node)
        res = pool.run(node, login_command(reg), stdin=password + "\n", timeout=120)
        if res.rc != 0:
            err = (res.stderr or res.stdout).replace(password, "***").strip()[-400:]
            raise RemoteError(f"docker login to registry {reg.server} as {reg.resolve_username()!r} failed on node {node}: "
                              f"{err}", node=node)

    def pull(self, pool: SSHPool, node: str, facts: NodeFacts) -> None:
        res = pool.run(node, image_inspect_command(self.image), timeout=60)
        if res.rc != 0:
            pr = pool.run(node, pull_command(self.image), timeout=3600)
            if pr.rc != 0:
                raise RemoteError(f"node {node}: docker pull {self.image} failed: {pr.stderr.strip()[-400:]}",
                                  node=node)
            facts.pulled = True
            res = pool.run(node, image_inspect_command(self.image), timeout=60, check=True)
        facts.image_digest = parse_digest(res.stdout, self.image)

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
            self.login(pool, n)
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
                     facts: NodeFacts, log_dir: str, attempt: int = 1, mpi_key_dir: str | None = None) -> str:
        env = dict(spec.env)
        env[TRIAL_ENV] = trial.key
        env["DLPERF_OUT"] = CONTAINER_LOG_DIR
        mounts = [f"{mpi_key_dir}:/root/.ssh:ro"] if mpi_key_dir else []
        argv = docker_run_argv(self.spec, self.image, self.container_name(run_id, trial, node.name, attempt),
                               self.labels(run_id, trial, node.name), node=node, facts=facts, env=env,
                               workdir=spec.workdir, command=spec.argv, log_dir=log_dir, extra_mounts=mounts)
        # no ``exec``: the job wrapper must survive docker to record its exit code
        return f"mkdir -p {shlex.quote(log_dir)} && " + shlex.join(argv)

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
                           key_dir: str, attempt: int = 1) -> str:
        """Detached helper container running sshd for mpirun (on every node of the trial)."""
        env = {TRIAL_ENV: trial.key}
        argv = docker_run_argv(self.spec, self.image, self.container_name(run_id, trial, node.name, attempt, "sshd"),
                               self.labels(run_id, trial, node.name), node=node, facts=facts, env=env,
                               workdir=None, command=self.sshd_argv(node), log_dir=log_dir, detach=True,
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


def parse_digest(inspect_out: str, image: str) -> str | None:
    """``repo@sha256:...`` for the image's repository from ``docker image inspect`` output, else the image id."""
    text = inspect_out.strip()
    if not text:
        return None
    js, _, image_id = text.partition(" ")
    try:
        digests = json.loads(js) or []
    except ValueError:
        digests = []
    repo = image.split("@")[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: repo.rfind(":")]
    for d in digests:
        if d.split("@")[0] == repo:
            return d
    return digests[0] if digests else (image_id.strip() or None)


def make_runtime(container: ContainerSpec | None, image: str | None = None, registry: Registry | None = None,
                 launcher: Mapping | None = None, ssh_port: int | None = None) -> HostRuntime:
    """The suite's runtime; ``ssh_port`` (from the inventory's ``mpi_ssh_port``) overrides the suite's sshd port."""
    if container is None:
        return HostRuntime()
    from dlperf_tasks.catalog.validate import check_image_ref

    check_image_ref(image or container.image, "image")
    sshd_cmd = (launcher or {}).get("sshd_command")
    return DockerRuntime(container, image=image, registry=registry,
                         sshd_command=[str(a) for a in sshd_cmd] if sshd_cmd else None, ssh_port=ssh_port)
