"""Checks of suite fields whose values reach a shell or a command line: Docker image references,
container options, the upstream repository, environment variable names, and plain one-line text."""

from __future__ import annotations

import re
import string
from typing import Any

from dlperf_tasks.catalog.problems import Problems
from dlperf_tasks.catalog.yamlsrc import KeyPath
from dlperf_tasks.core.errors import CatalogError

# Docker image reference: [host[:port]/]name[/name...][:tag][@sha256:digest]
_IMAGE_RE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


def check_image_ref(ref: str, where: str = "image") -> str:
    """Return ``ref`` if it is a plain Docker image reference, else raise CatalogError naming ``where``.

    Guards every image that reaches ``docker pull/run`` argv: a value such as ``--privileged``
    or ``-v/:/host`` would otherwise be read by docker as an option.
    """
    if not isinstance(ref, str) or not _IMAGE_RE.match(ref):
        raise CatalogError(f"{where}: {ref!r} is not a Docker image reference ([registry/]name[:tag][@sha256:digest])")
    return ref


_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_REPO_RE = re.compile(r"^https://[A-Za-z0-9.-]+(?::[0-9]+)?/[A-Za-z0-9._/-]+$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ULIMIT_RE = re.compile(r"^[a-z]+=-?[0-9]+(?::-?[0-9]+)?$")
_DEVICE_RE = re.compile(r"^/[A-Za-z0-9_./-]+(?::/[A-Za-z0-9_./-]+)?(?::[rwm]{1,3})?$")
_CAP_RE = re.compile(r"^[A-Z][A-Z_]*$")
_MOUNT_RE = re.compile(r"^[^:\s]+:/[^:\s]*(?::(?:ro|rw))?$")
#: placeholders a mount may use; remote/runtime.py docker_run_argv() fills them from the inventory node
MOUNT_PLACEHOLDERS = frozenset({"data_dir", "workdir", "node"})
_RELPATH_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")

# free text that may span lines (never reaches a shell)
_MULTILINE_OK = {("description",), ("notes",), ("upstream", "note")}


def check_plain_strings(data: Any, path: KeyPath, problems: Problems) -> None:
    """Strings that may reach a shell or a command line: no NUL, no line breaks, no other control chars."""
    if path in _MULTILINE_OK or (len(path) >= 3 and path[:2] == ("upstream", "patches")):
        return
    if isinstance(data, str):
        bad = [c for c in data if ord(c) < 32 and c != "\t" or c == "\x7f"]
        if bad:
            problems.add(path, f"contains control character {bad[0]!r}; values must be plain one-line text")
    elif isinstance(data, dict):
        for k, v in data.items():
            if not isinstance(k, str):
                problems.add(path + (k,), f"key {k!r} must be a string")
                continue
            check_plain_strings(k, path + (k,), problems)
            check_plain_strings(v, path + (k,), problems)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            check_plain_strings(v, path + (i,), problems)
    elif data is not None and not isinstance(data, (bool, int, float)):
        problems.add(path, f"unsupported value of type {type(data).__name__} (use strings, numbers, lists, mappings)")



_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_DRIVER_RE = re.compile(r"^[0-9]{3}(\.[0-9]{1,3}){0,2}$")


def check_container(c: dict, problems: Problems) -> None:
    p = ("container",)
    image = c["image"]
    if not _IMAGE_RE.match(image):
        problems.add(p + ("image",), f"invalid image reference {image!r} (expected registry/repo:tag, e.g. nvcr.io/nvidia/mxnet:20.03-py3)")
    if c.get("digest") and not _DIGEST_RE.match(c["digest"]):
        problems.add(p + ("digest",), f"invalid digest {c['digest']!r} (expected sha256: and 64 lower-case hex digits)")
    if "@" in image and c.get("digest"):
        problems.add(p + ("image",), "give the digest in container.digest only, not also in the image reference")
    if c.get("min_driver") and not _DRIVER_RE.match(c["min_driver"]):
        problems.add(p + ("min_driver",), f"invalid driver version {c['min_driver']!r} (expected e.g. 570.124)")
    for i, u in enumerate(c.get("ulimits", [])):
        if not _ULIMIT_RE.match(u):
            problems.add(p + ("ulimits", i), f"invalid ulimit {u!r} (expected name=soft[:hard], e.g. memlock=-1)")
    for i, d in enumerate(c.get("devices", [])):
        if not _DEVICE_RE.match(d):
            problems.add(p + ("devices", i), f"invalid device {d!r} (expected an absolute path like /dev/infiniband)")
    for i, cap in enumerate(c.get("cap_add", [])):
        if not _CAP_RE.match(cap):
            problems.add(p + ("cap_add", i), f"invalid capability {cap!r} (expected e.g. IPC_LOCK)")
    for i, m in enumerate(c.get("mounts", [])):
        if not _MOUNT_RE.match(m) or any(q in m for q in "`'\""):
            problems.add(p + ("mounts", i), f"invalid mount {m!r} (expected host_path:/container_path[:ro|rw])")
        elif not string.Template(m).is_valid() or set(string.Template(m).get_identifiers()) - MOUNT_PLACEHOLDERS:
            problems.add(p + ("mounts", i), f"invalid mount {m!r}: '$' may only start a placeholder "
                                            f"{', '.join('${%s}' % k for k in sorted(MOUNT_PLACEHOLDERS))} ('$$' = '$')")


def check_upstream(u: dict, problems: Problems) -> None:
    p = ("upstream",)
    if not _REPO_RE.match(u["repo"]):
        problems.add(p + ("repo",), f"invalid repository URL {u['repo']!r} (expected https://host/owner/name)")
    commit, ref = u.get("commit", ""), u.get("ref", "")
    if commit and not _COMMIT_RE.match(commit):
        problems.add(p + ("commit",), f"commit {commit!r} must be the full 40-hex-digit lower-case SHA-1")
    if not commit and not ref:
        problems.add(p, "needs 'commit' (40 hex digits) or at least 'ref' (branch/tag)")
    if ref and not _TAG_RE.match(ref.replace("/", "_")):
        problems.add(p + ("ref",), f"invalid git ref {ref!r}")
    for key_path, value in [(p + ("workdir",), u.get("workdir", ""))] + [
        (p + ("patches", i, "path"), patch["path"]) for i, patch in enumerate(u.get("patches", []))
    ]:
        if value and (not _RELPATH_RE.match(value) or ".." in value.split("/")):
            problems.add(key_path, f"{value!r} must be a relative path inside the repository (no '..')")


def env_of(data: dict, key: str, problems: Problems) -> dict[str, str]:
    env = {}
    for k, v in (data.get(key) or {}).items():
        if not _ENV_KEY_RE.match(k):
            problems.add((key, k), f"invalid environment variable name {k!r}")
        env[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return env
