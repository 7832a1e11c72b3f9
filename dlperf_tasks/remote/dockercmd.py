"""Pure docker/node command builders and node facts, used by :mod:`dlperf_tasks.remote.runtime`:
the seeds' ``docker run`` flags, labels, the container env file, the leftover scans (and the
removal of registry configs older builds left). Nothing here runs anything."""

from __future__ import annotations

import json
import re
import shlex
import string
from dataclasses import dataclass, field
from typing import Mapping

from dlperf_tasks.catalog.model import ContainerSpec
from dlperf_tasks.core.errors import RemoteError
from dlperf_tasks.remote.inventory import Node

LABEL_RUN = "dlperf.run"
LABEL_TRIAL = "dlperf.trial"
LABEL_NODE = "dlperf.node"
#: set in every trial process' environment so leftovers can be found in /proc on the node
TRIAL_ENV = "DLPERF_TRIAL"
#: the local runtime's mark (remote/local.py): one value per trial run, and a name the nodes'
#: leftover search (``^DLPERF_TRIAL=``) does not match, since test nodes share this machine
TRIAL_MARK_ENV = "DLPERF_TRIAL_MARK"
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
    #: the GPU model nvidia-smi names on the node (``--query-gpu=name``; env capture), None when unknown
    gpu_model: str | None = None
    pulled: bool = False
    #: suite flags the node's container runtime refuses with "operation not permitted" (e.g. ``--privileged``
    #: or ``--ulimit memlock=-1`` inside an unprivileged sandbox); dropped on that node and noted
    dropped_flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- pure command builders ------------------------------------------------------------
#: Older builds logged in with a per-run ``DOCKER_CONFIG`` under the node's temp directory
#: (``dlperf-docker-config.XXXXXXXX/config.json``, holding the registry password) that a SIGKILL
#: could leave behind. Logins no longer write anything on a node (remote/engine.py); node cleanup
#: removes such leftovers (only the connecting user's own directories, at the top of each temp dir).
LEFTOVER_REGISTRY_CONFIG_CLEANUP = (
    'for d in "${TMPDIR:-/tmp}" /tmp /var/tmp; do '
    'find "$d" -maxdepth 1 -type d -name "dlperf-docker-config.*" -user "$(id -u)" '
    '-exec rm -rf -- {} + 2>/dev/null; done; true')


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
                    facts: NodeFacts, env_file: str | None, workdir: str | None, command: list[str],
                    log_dir: str | None = None, detach: bool = False, extra_mounts: list[str] = (),
                    marker_env: str | None = None) -> list[str]:
    """The full ``docker run`` argv (pure; tests check it as a list). The container's environment
    comes from ``env_file`` (see :func:`docker_env_file`), never from ``-e NAME=value`` words."""
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
    if env_file:
        argv += ["--env-file", env_file]
    if marker_env:  # the trial marker only (``DLPERF_TRIAL=<key>``, no secret), for the leftover scan
        argv += ["-e", marker_env]
    if workdir:
        argv += ["-w", workdir]
    argv.append(image)
    argv += list(command)
    return argv


#: docker reads an env file line by line (64 KiB at most a line), each ``NAME=value`` taken literally
_DOCKER_ENV_LINE_MAX = 60000


def docker_env_file(env: Mapping[str, str]) -> bytes:
    """``env`` in ``docker run --env-file`` format. Values are literal to the end of the line, so a
    value holding a line break (or NUL) cannot be passed this way and is refused, naming the variable."""
    lines = []
    for k, v in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise RemoteError(f"invalid environment variable name {k!r}")
        if any(c in v for c in "\n\r\x00"):
            raise RemoteError(f"environment variable {k}: a container's environment value cannot hold a line "
                              f"break or NUL (docker --env-file)")
        line = f"{k}={v}"
        if len(line.encode()) > _DOCKER_ENV_LINE_MAX:
            raise RemoteError(f"environment variable {k}: value longer than {_DOCKER_ENV_LINE_MAX} bytes")
        lines.append(line + "\n")
    return "".join(lines).encode()


def parse_digest(inspect_out: str, image: str) -> str | None:
    """``repo@sha256:...`` for the image's repository from ``docker image inspect`` output, else the image id."""
    text = inspect_out.strip()
    if not text:
        return None
    # "<json list> <id>": the list itself has spaces when an image has several repo digests
    js, _, image_id = text.rpartition(" ")
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
