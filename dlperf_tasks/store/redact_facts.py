"""What redaction knows about a cluster: the inventory's hosts/names/users, the node facts
prepare gathered (``remote.envcapture.node_identity``, stored in the run dir) and this
machine's own names. Used by ``store/redact.py``; the spool persists :class:`Secrets` locally."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core import resolved_secrets

NODE_FACTS_FILE = "node-facts.json"  # per run dir; ``{node: {..., "identity": node_identity(...)}}``
NODE_IDENTITY_FILE = "node-identity.json"  # per run dir; ``{node: node_identity(...)}`` (either works)


def _uniq(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for i in items:
        i = str(i).strip()
        if i:
            seen.setdefault(i, None)
    return tuple(seen)


@dataclass(frozen=True)
class Secrets:
    """What must not appear in a published object (persisted in the spool's local-only dir)."""

    hosts: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    check_ips: bool = True
    extra: tuple[str, ...] = ()  # MACs, GUIDs and other exact strings from the node facts

    def terms(self) -> list[tuple[str, str]]:
        return [("host", h) for h in self.hosts] + [("node", n) for n in self.names] + \
               [("user", u) for u in self.users]

#: an inventory file larger than this is not an inventory
_MAX_INVENTORY_BYTES = 16 << 20


def secrets_from_inventory(inventory: Any, names: bool = True) -> Secrets:
    """Hosts, node names and users of a cluster inventory: a ``remote.inventory.Cluster``,
    a YAML path, or its dict form (``{nodes: [{name, host, user, address}], defaults: {...}}``)."""
    if inventory is None:
        return Secrets()
    if isinstance(inventory, (str, bytes)) or hasattr(inventory, "__fspath__"):
        inventory = _inventory_doc(inventory)
    _remember_inventory_secrets(inventory)
    hosts: list[str] = []
    node_names: list[str] = []
    users: list[str] = []
    if isinstance(inventory, Mapping):
        defaults = inventory.get("defaults") or {}
        raw = inventory.get("nodes") or []
        if isinstance(raw, Mapping):
            raw = [dict(v or {}, name=k) for k, v in raw.items()]
        nodes = [dict(defaults, **n) for n in raw]
        get = lambda n, k: n.get(k)  # noqa: E731
    else:
        nodes = list(getattr(inventory, "nodes", []) or [])
        get = lambda n, k: getattr(n, k, None)  # noqa: E731
    for n in nodes:
        for k in ("host", "address"):
            if get(n, k):
                hosts.append(str(get(n, k)))
        if names and get(n, "name"):
            node_names.append(str(get(n, "name")))
        u = get(n, "user") or get(n, "login")
        if u:
            users.append(str(u))
    return Secrets(hosts=_uniq(hosts), names=_uniq(node_names), users=_uniq(users))


_SECRET_KEYS = ("password", "private_key", "private_key_passphrase")


def _remember_inventory_secrets(inventory: Any) -> None:
    """Register the inventory's secrets (node passwords, key texts and passphrases, the ones its
    ``*_env`` variables name, the registry password) with the leak check's registry."""
    import os

    if isinstance(inventory, Mapping):
        raw = inventory.get("nodes") or []
        nodes = [dict(v or {}) for v in raw.values()] if isinstance(raw, Mapping) else list(raw)
        for n in [inventory.get("defaults") or {}, *nodes]:
            if isinstance(n, Mapping):
                resolved_secrets.remember(*(n.get(k) for k in _SECRET_KEYS))
                resolved_secrets.remember(*(os.environ.get(str(n.get(f"{k}_env"))) for k in _SECRET_KEYS
                                            if n.get(f"{k}_env")))
        reg = inventory.get("registry")
        if isinstance(reg, Mapping) and reg.get("password_env"):
            resolved_secrets.remember(os.environ.get(str(reg["password_env"])))
        return
    reg = getattr(inventory, "registry", None)
    if reg is not None and hasattr(reg, "resolve_password"):
        reg.resolve_password()  # registers what password_env / the env file / a connection gave
    for n in getattr(inventory, "nodes", None) or ():
        resolved_secrets.remember(*(getattr(n, k, None) for k in _SECRET_KEYS))


def read_node_identities(run_dir: str | Path) -> dict[str, dict]:
    """``{node: identity}`` from the run dir: ``node-identity.json`` (``{node: identity}``) and/or
    the ``identity`` entry of each node in ``node-facts.json``."""
    out: dict[str, dict] = {}
    for name, nested in ((NODE_FACTS_FILE, True), (NODE_IDENTITY_FILE, False)):
        p = Path(run_dir) / name
        if not p.is_file():
            continue
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"redaction: cannot read node facts {p}: {exc}") from None
        for node, facts in (doc.items() if isinstance(doc, dict) else ()):
            ident = facts.get("identity") if nested and isinstance(facts, dict) else facts
            if isinstance(ident, dict):
                out[str(node)] = ident
    return out


def controller_identity() -> dict:
    """This machine's own names (the controller's host name reaches lease reasons)."""
    names = {socket.gethostname()}
    try:
        names.add(socket.getfqdn())
    except OSError:  # pragma: no cover
        pass
    return {"os_hostname": socket.gethostname(), "short_names": sorted(n for n in names if n)}


def identity_terms(ident: Mapping[str, Any]) -> tuple[list[str], list[str], list[str], list[str]]:
    """(host names, addresses, users, other exact strings) of one node identity."""
    hosts: list[str] = []
    for k in ("os_hostname", "fqdn"):
        if ident.get(k):
            hosts.append(str(ident[k]))
    hosts += [str(x) for x in ident.get("short_names") or ()]
    addrs = [str(a) for a in ident.get("addresses") or ()]
    users = [str(u) for u in ident.get("users") or ()]
    extra = [str(m) for m in (ident.get("macs") or ())] + [str(g) for g in (ident.get("ib_guids") or ())]
    return hosts, addrs, users, extra


def _inventory_doc(path) -> Mapping[str, Any]:
    """An inventory YAML file in its dict form (the store reads only names, hosts and users;
    loading and checking inventories is the remote layer's)."""
    import yaml

    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_INVENTORY_BYTES + 1)
        if len(data) > _MAX_INVENTORY_BYTES:
            raise StoreError(f"redaction: inventory {path} is larger than {_MAX_INVENTORY_BYTES >> 20} MiB")
        doc = yaml.safe_load(data)
    except (OSError, yaml.YAMLError) as exc:
        raise StoreError(f"redaction: cannot load inventory {path}: {exc}") from None
    if not isinstance(doc, Mapping):
        raise StoreError(f"redaction: cannot load inventory {path}: not a mapping of nodes")
    return doc
