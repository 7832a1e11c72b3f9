"""The in-memory form of a suite YAML (dlperf_tasks/catalog/suites/<id>.yaml).

The loader (catalog/loader.py) validates a YAML and builds a :class:`Suite`;
planning (dlperf_tasks/catalog/plan.py) turns a Suite + overrides into cells and trials.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlperf_tasks.catalog.nodefiles import launch_metadata
from dlperf_tasks.catalog.shipping import node_files
from dlperf_tasks.core.model import ParallelLayout, Window
from dlperf_tasks.core.topology import Topology


@dataclass(frozen=True, slots=True)
class Patch:
    """A source patch a seed requires: ``file`` names a unified diff among the catalog data files,
    applied on the nodes before every trial (catalog/patches.py); without one the patch is only
    declared (``diff`` may show it) and nothing applies it."""

    path: str
    description: str
    diff: str = ""
    file: str = ""


@dataclass(frozen=True, slots=True)
class Upstream:
    repo: str  # e.g. https://github.com/dmlc/gluon-nlp
    commit: str  # 40-hex pinned commit
    workdir: str = ""  # path inside the repo where the command runs, e.g. scripts/bert
    patches: tuple[Patch, ...] = ()
    ref: str = ""  # branch/tag the seed names (e.g. r2.3.0) when it gives no commit; commit may then be ""


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """How the trial container is started (seeds' docker run flags)."""

    image: str  # registry/repo:tag, e.g. nvcr.io/nvidia/mxnet:20.03-py3
    shm_size: str = "16g"
    ulimits: tuple[str, ...] = ("memlock=-1",)
    ipc_host: bool = True
    net_host: bool = True
    devices: tuple[str, ...] = ()  # e.g. /dev/infiniband (only when present on the node)
    privileged: bool = False
    mounts: tuple[str, ...] = ()  # "host:container[:ro]"; ${data_dir} etc. expanded from the inventory
    sshd_port: int | None = None  # MPI launch mode: containers run sshd on this port
    cap_add: tuple[str, ...] = ()  # e.g. IPC_LOCK (seed 000: --cap-add=IPC_LOCK)
    digest: str | None = None  # sha256:<64 hex>: pulled by digest; a node that reports another refuses the trial
    min_driver: str | None = None  # minimum NVIDIA driver the image needs
    versions: tuple[tuple[str, str], ...] = ()  # (component, version): cuda, nccl, pytorch, ...

    @property
    def pull_ref(self) -> str:
        """What nodes pull: ``repo:tag@sha256:...`` when the catalog pins a digest, else the tag."""
        return f"{self.image.split('@')[0]}@{self.digest}" if self.digest else self.image

    def pinned_for(self, image: str | None) -> str | None:
        """The digest that pins ``image`` (what a trial runs): the catalog's, for the catalog's tag, also
        through a site mirror (same tag); None for another tag (conf image_tag) or without a digest."""
        return self.digest if self.digest and _tag(image or self.image) == _tag(self.image) else None

    def pinned_ref(self, image: str | None) -> str:
        """``image`` (default the catalog's) referenced by its pinned digest, when one pins it."""
        base, digest = image or self.image, self.pinned_for(image)
        return f"{base}@{digest}" if digest and "@" not in base else base


def _tag(image: str) -> str:
    """The tag of ``registry/repo:tag[@digest]`` ("" when none)."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


@dataclass(frozen=True, slots=True)
class Suite:
    id: str  # "mxnet-bert"
    framework: str  # framework module name (dlperf_tasks.frameworks), e.g. "mxnet_bert"
    dag: str  # which per-framework DAG runs it: mxnet | pytorch | tensorflow | megatron | smoke
    model: str  # "bert-base"
    description: str
    container: ContainerSpec | None  # None = host runtime only
    upstream: Upstream | None
    launcher: dict[str, Any]  # framework-specific launcher settings (template, script, args...)
    env: dict[str, str]
    window: Window
    trials: int
    batch_sizes: tuple[int, ...]
    precisions: tuple[str, ...]  # fp32 | amp
    xla: tuple[bool, ...]
    topologies: tuple[Topology, ...]
    layouts: tuple[tuple[Topology, ParallelLayout], ...] = ()  # Megatron: the seed-002 cases
    timeout_s: int = 3600  # per-trial wall clock
    hang_timeout_s: int = 600  # no-progress watchdog
    source: str = ""  # file it was loaded from
    extra: dict[str, Any] = field(default_factory=dict)
    #: precision -> batch sizes when they differ per precision (RN50: fp32 128, amp 256); empty = ``batch_sizes`` for all
    batch_sizes_by_precision: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: combinations left out of the default sweep (e.g. OOM): dicts with keys batch_size/precision/xla/topology
    exclude: tuple[dict[str, Any], ...] = ()
    #: extra environment for cells with more than one node (e.g. NCCL_DEBUG=INFO, as the seeds' multi-node scripts)
    env_multi_node: dict[str, str] = field(default_factory=dict)
    #: gradient accumulation steps swept as a cell parameter (pytorch-bert, seed 001); empty = not a parameter
    #: an item ``"global_batch:<N>"`` is seed 001's rule: N / (batch per device x GPUs) per cell
    accumulation_steps: tuple[int | str, ...] = ()
    #: cron of the suite's DAG (catalog/cron.py; the suites of one DAG agree); None = manual triggers only
    schedule: str | None = None

    def node_files(self) -> dict[str, bytes]:
        """Catalog data files prepare puts on every node: ``{relpath: bytes}`` (see catalog/nodefiles.py)."""
        return node_files(self)

    def launch_metadata(self) -> dict[str, Any]:
        """Model config / optimizer / max_iter / accumulation, for the result's run metadata."""
        return launch_metadata(self)

    def env_for(self, topology: Topology) -> dict[str, str]:
        """Environment for a cell: ``env`` plus ``env_multi_node`` when the topology has several nodes."""
        return {**self.env, **self.env_multi_node} if topology.nodes > 1 else dict(self.env)

    def batch_sizes_for(self, precision: str) -> tuple[int, ...]:
        """Default batch sizes per device for ``precision`` (falls back to ``batch_sizes``)."""
        return self.batch_sizes_by_precision.get(precision, self.batch_sizes)

    def accumulations_for(self, batch_size: int, topology: Topology) -> tuple[int | None, ...]:
        """The cell's accumulation values for one batch size and topology (``(None,)``: not a parameter).
        Raises ValueError when a ``global_batch:<N>`` item does not divide by batch x GPUs."""
        if not self.accumulation_steps:
            return (None,)
        return tuple(dict.fromkeys(resolve_accumulation(a, batch_size, topology.world_size)
                                   for a in self.accumulation_steps))

    def excluded(self, batch_size: int, precision: str, xla: bool, topology: Topology,
                 accumulation: int | None = None) -> bool:
        """True when the default sweep leaves this combination out (``exclude`` rules; all given keys must match)."""
        values = {"batch_size": batch_size, "precision": precision, "xla": xla, "topology": topology.name,
                  "gradient_accumulation_steps": accumulation}
        return any(all(values.get(k) == v for k, v in rule.items()) for rule in self.exclude)


#: ``gradient_accumulation_steps`` item naming a global batch (seed 001: ``global_batch:67584``)
GLOBAL_BATCH_PREFIX = "global_batch:"


def resolve_accumulation(spec: int | str, batch_size: int, world_size: int) -> int:
    """An accumulation item for one cell: an int as it is; ``global_batch:N`` = N / (batch x world)
    (seed 001's ``run_benchmark.sh``: ``gradient_accumulation_steps=$(expr 67584 / $batch_size / $num_gpus)``)."""
    if isinstance(spec, int):
        return spec
    gbs = int(str(spec)[len(GLOBAL_BATCH_PREFIX):])
    per_step = batch_size * world_size
    if gbs % per_step:
        raise ValueError(f"global batch {gbs} is not a multiple of batch {batch_size} x {world_size} GPU(s)")
    return gbs // per_step
