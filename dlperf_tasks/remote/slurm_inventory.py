"""The Slurm inventory: a cluster file that says ``scheduler: slurm`` (docs/slurm.md).

dlperf reaches a Slurm cluster the way its users do: over SSH to a login node, where ``sinfo``,
``sbatch``, ``squeue``, ``sacct`` and ``scancel`` run; Slurm places the jobs. The login hosts follow
the same SSH rules as a Docker cluster's nodes (``remote/inventory.py``: key file or key text from
the environment / an Airflow connection, host key checked against ``known_hosts`` unless
``strict_host_key_checking: false``).

YAML shape::

    name: mycluster
    scheduler: slurm
    login:                          # one mapping or a list (tried in order); every SSH key of a node
      - host: login1.example.org    # (remote/inventory.py) is allowed; ``defaults`` applies as there
        user: alice
        key_file: ~/.ssh/id_ed25519
        known_hosts: ~/.ssh/known_hosts
    slurm:
      partition: gpu                # required
      account: dl-bench             # sbatch --account (optional)
      qos: normal                   # --qos (optional)
      reservation: bench-week       # --reservation (optional)
      time_limit: "00:30:00"        # per trial: --time (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])
      gpus_per_node: 8              # --gpus-per-node
      work_dir: /lustre/alice/dlperf   # on the shared filesystem every node mounts (absolute)
      container: pyxis              # pyxis | apptainer | singularity | none
      max_in_flight: 4              # trials submitted at once (the scheduler does placement)
      exclude: [node7]              # never these nodes (--exclude); quarantined nodes are added
      mpi: pmix                     # srun --mpi= for suites launched with MPI
      check_image: nvcr.io/nvidia/pytorch:24.01-py3   # what `dlperf cluster check` runs a step in
    registry: {server: nvcr.io}     # optional; credentials stay the site's (enroot / apptainer files)
    images: [...]                   # optional mirror list, as for a Docker cluster

Every error is one line naming the file and the field (``slurm.partition``, ``login[0].host``).
"""

from __future__ import annotations

import dataclasses

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dlperf_tasks.catalog.yamlsrc import parse_yaml
from dlperf_tasks.core.errors import CatalogError, RemoteError
from dlperf_tasks.remote.inventory import Cluster, Node

CONTAINER_MODES = ("pyxis", "apptainer", "singularity", "none")
_TOP_KEYS = {"name", "scheduler", "login", "defaults", "slurm", "registry", "images", "interconnect_probe"}
_SLURM_KEYS = {"partition", "account", "qos", "reservation", "time_limit", "gpus_per_node", "work_dir", "container",
               "max_in_flight", "exclude", "mpi", "check_image"}
#: Slurm object names (partition, account, QoS, reservation, node): they go into sbatch lines
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_MPI_TYPES = ("pmix", "pmi2", "none")


def parse_time_limit(value: Any, what: str) -> int:
    """Slurm's --time forms -> seconds: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    text = str(value).strip()
    m = _TIME_RE.match(text)
    if not m or isinstance(value, bool):
        raise RemoteError(f"{what}: {value!r} is not a Slurm time (minutes, MM:SS, HH:MM:SS or D-HH:MM:SS)")
    days, first, second, third = m.groups()
    a, b, c = int(first), int(second or 0), int(third or 0)
    if days is not None:                       # D-H, D-H:M, D-H:M:S
        seconds = int(days) * 86400 + a * 3600 + b * 60 + c
    elif third is not None:                    # H:M:S
        seconds = a * 3600 + b * 60 + c
    elif second is not None:                   # M:S
        seconds = a * 60 + b
    else:                                      # M
        seconds = a * 60
    if seconds <= 0:
        raise RemoteError(f"{what}: must be more than 0, got {value!r}")
    return seconds


def format_time_limit(seconds: int) -> str:
    """Seconds -> ``D-HH:MM:SS`` (what sbatch --time takes); a partial minute is rounded up by Slurm."""
    days, rest = divmod(int(seconds), 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


def enroot_uri(image: str) -> str:
    """A Docker reference as pyxis/enroot take it: the registry is followed by ``#``
    (``nvcr.io/nvidia/pytorch:24.01-py3`` -> ``nvcr.io#nvidia/pytorch:24.01-py3``); an image of the
    default registry (``nvidia/cuda:12.4.1-base``) stays as it is."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


@dataclass(frozen=True)
class SlurmSettings:
    partition: str
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    time_limit_s: int = 3600
    gpus_per_node: int = 8
    work_dir: str = ""
    container: str = "pyxis"
    max_in_flight: int = 4
    exclude: tuple[str, ...] = ()
    mpi: str = "pmix"
    check_image: str | None = None
    #: the cluster file's top-level ``interconnect_probe`` (docs/interconnect-probe.md)
    interconnect_probe: Mapping[str, Any] | bool | None = None

    @property
    def time_limit(self) -> str:
        return format_time_limit(self.time_limit_s)

    def sbatch_options(self) -> list[str]:
        """The placement options every job of this cluster gets (one argv element each)."""
        out = [f"--partition={self.partition}"]
        for key in ("account", "qos", "reservation"):
            if getattr(self, key):
                out.append(f"--{key}={getattr(self, key)}")
        out.append(f"--time={self.time_limit}")
        return out


@dataclass(frozen=True)
class SlurmCluster:
    """A Slurm cluster reached through its login host(s)."""

    login: tuple[Node, ...]
    slurm: SlurmSettings
    name: str = "cluster"
    source: str = ""
    registry_server: str | None = None
    images: tuple[str, ...] = ()
    scheduler = "slurm"

    def login_cluster(self) -> Cluster:
        """The login hosts as a :class:`Cluster`, so ``SSHPool(c.login_cluster())`` reaches them."""
        return Cluster(self.login, name=self.name, source=self.source, images=self.images)

    @property
    def login_names(self) -> list[str]:
        return [n.name for n in self.login]

    def resolve_image(self, image: str | None) -> str | None:
        """The suite's image or the cluster's mirror of it (same rule as a Docker cluster)."""
        return self.login_cluster().resolve_image(image)

    def public_dict(self) -> dict[str, Any]:
        """What may be written into results: no host, user or key."""
        s = self.slurm
        return {"name": self.name, "scheduler": "slurm", "partition": s.partition, "gpus_per_node": s.gpus_per_node,
                "container": s.container}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "inventory") -> "SlurmCluster":
        if not isinstance(data, Mapping):
            raise RemoteError(f"{source}: expected a mapping with 'scheduler: slurm', got {type(data).__name__}")
        if str(data.get("scheduler", "")).strip().lower() != "slurm":
            raise RemoteError(f"{source}: scheduler: must be 'slurm' for a Slurm cluster file, "
                              f"got {data.get('scheduler')!r}")
        if "nodes" in data:
            raise RemoteError(f"{source}: nodes: a Slurm cluster file names login hosts ('login'), not nodes")
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            raise RemoteError(f"{source}: unknown key(s) {unknown} in a Slurm cluster file; known: {sorted(_TOP_KEYS)}")
        login = _login_nodes(data.get("login"), data.get("defaults") or {}, source)
        slurm = _settings(data.get("slurm"), source)
        probe = data.get("interconnect_probe")
        if probe is not None and not isinstance(probe, (Mapping, bool)):
            raise RemoteError(f"{source}: interconnect_probe: must be a mapping or true/false")
        slurm = dataclasses.replace(slurm, interconnect_probe=probe)
        reg = data.get("registry")
        if reg is not None and (not isinstance(reg, Mapping) or not reg.get("server")):
            raise RemoteError(f"{source}: registry: needs 'server'")
        if isinstance(reg, Mapping) and set(reg) - {"server"}:
            raise RemoteError(f"{source}: registry: only 'server' is read on a Slurm cluster; credentials are "
                              f"the site's (enroot's credentials file or Apptainer's), never this file")
        images = data.get("images") or ()
        if not isinstance(images, (list, tuple)):
            raise RemoteError(f"{source}: images: must be a list of image references")
        return cls(login, slurm, name=str(data.get("name") or "cluster"), source=source,
                   registry_server=str(reg["server"]) if reg else None, images=tuple(str(i) for i in images))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> "SlurmCluster":
        return cls.from_dict(_read(path), source=str(path))


def _login_nodes(raw: Any, defaults: Any, source: str) -> tuple[Node, ...]:
    if isinstance(raw, Mapping):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise RemoteError(f"{source}: login: must be a login host (a mapping with 'host') or a non-empty list of them")
    if not isinstance(defaults, Mapping):
        raise RemoteError(f"{source}: defaults: must be a mapping")
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise RemoteError(f"{source}: login[{i}]: must be a mapping with 'host'")
        if not entry.get("host"):
            raise RemoteError(f"{source}: login[{i}].host: missing")
        data = {"name": entry.get("name") or ("login" if len(raw) == 1 else f"login{i + 1}"), "gpus": 0, **entry}
        try:
            out.append(Node.from_mapping(data, defaults, where=source))
        except RemoteError as exc:
            raise RemoteError(f"{source}: login[{i}]: {str(exc).removeprefix(source + ': ')}") from None
    names = [n.name for n in out]
    if len(set(names)) != len(names):
        raise RemoteError(f"{source}: login: duplicate name in {names}")
    return tuple(out)


def _name(s: Mapping, key: str, source: str) -> str | None:
    value = s.get(key)
    if value is None or value == "":
        return None
    text = str(value)
    if not _NAME_RE.match(text):
        raise RemoteError(f"{source}: slurm.{key}: {text!r} is not a Slurm name (letters, digits, '_', '.', '-')")
    return text


def _int(s: Mapping, key: str, source: str, default: int, minimum: int) -> int:
    value = s.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise RemoteError(f"{source}: slurm.{key}: must be a whole number, got {value!r}")
    if int(value) < minimum:
        raise RemoteError(f"{source}: slurm.{key}: must be at least {minimum}, got {value!r}")
    return int(value)


def _settings(raw: Any, source: str) -> SlurmSettings:
    if not isinstance(raw, Mapping):
        raise RemoteError(f"{source}: slurm: must be a mapping with at least 'partition' and 'work_dir'")
    unknown = sorted(set(raw) - _SLURM_KEYS)
    if unknown:
        raise RemoteError(f"{source}: slurm: unknown key(s) {unknown}; known: {sorted(_SLURM_KEYS)}")
    partition = _name(raw, "partition", source)
    if partition is None:
        raise RemoteError(f"{source}: slurm.partition: missing")
    work_dir = str(raw.get("work_dir") or "")
    if not work_dir:
        raise RemoteError(f"{source}: slurm.work_dir: missing (a directory on the filesystem every node shares)")
    if not work_dir.startswith("/") or any(c in work_dir for c in '$`"\\\'') or any(
            ord(c) < 32 or ord(c) == 127 for c in work_dir):
        raise RemoteError(f"{source}: slurm.work_dir: must be an absolute path without quotes, $, ` or \\, "
                          f"got {work_dir!r}")
    container = str(raw.get("container", "pyxis")).strip().lower()
    if container not in CONTAINER_MODES:
        raise RemoteError(f"{source}: slurm.container: must be one of {', '.join(CONTAINER_MODES)}, "
                          f"got {raw.get('container')!r}")
    mpi = str(raw.get("mpi", "pmix"))
    if mpi not in _MPI_TYPES:
        raise RemoteError(f"{source}: slurm.mpi: must be one of {', '.join(_MPI_TYPES)}, got {mpi!r}")
    exclude = raw.get("exclude") or []
    if isinstance(exclude, str):
        exclude = [exclude]
    if not isinstance(exclude, list) or not all(isinstance(x, str) and _NAME_RE.match(x) for x in exclude):
        raise RemoteError(f"{source}: slurm.exclude: must be a list of node names, got {raw.get('exclude')!r}")
    check_image = raw.get("check_image")
    if check_image is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:/@#-]*$", str(check_image)):
        raise RemoteError(f"{source}: slurm.check_image: {check_image!r} is not an image reference")
    return SlurmSettings(
        partition=partition, account=_name(raw, "account", source),
        qos=_name(raw, "qos", source), reservation=_name(raw, "reservation", source),
        time_limit_s=parse_time_limit(raw.get("time_limit", "01:00:00"), f"{source}: slurm.time_limit"),
        gpus_per_node=_int(raw, "gpus_per_node", source, 8, 0), work_dir=work_dir.rstrip("/") or "/",
        container=container, max_in_flight=_int(raw, "max_in_flight", source, 4, 1), exclude=tuple(exclude),
        mpi=mpi, check_image=str(check_image) if check_image else None)


def _read(path: str | os.PathLike) -> Any:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise RemoteError(f"cannot read cluster inventory {p}: {exc.strerror}") from None
    if not text.strip():
        raise RemoteError(f"cluster inventory {p}: file is empty")
    try:
        data, _ = parse_yaml(text, str(p))
    except CatalogError as exc:
        raise RemoteError(f"cluster inventory {exc}") from None
    return data


def scheduler_of(path: str | os.PathLike) -> str:
    """``slurm`` or ``docker`` (the default) for the cluster file at ``path``."""
    data = _read(path)
    value = data.get("scheduler", "docker") if isinstance(data, Mapping) else "docker"
    value = str(value).strip().lower()
    if value not in ("docker", "slurm"):
        raise RemoteError(f"{path}: scheduler: must be 'docker' or 'slurm', got {value!r}")
    return value


def load_cluster(path: str | os.PathLike) -> Cluster | SlurmCluster:
    """The cluster file at ``path`` as a Docker :class:`Cluster` or a :class:`SlurmCluster`."""
    if scheduler_of(path) == "slurm":
        return SlurmCluster.from_yaml(path)
    return Cluster.from_yaml(path)
