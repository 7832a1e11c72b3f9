"""Redaction of published text: IP addresses, cluster host names, node names and user names.

A :class:`Redactor` replaces, consistently within one run (the same input always gives the
same placeholder, numbered by first appearance):

* every IPv4 and IPv6 address (generic patterns, inventory or not)   -> ``<ip-1>``, ``<ip-2>``...
* the inventory's host names (and their FQDN forms)                    -> ``<host-1>``...
* the inventory's node names (when ``names`` are given)                -> ``<node-1>``...
* the inventory's user names (``root`` is kept: it identifies nobody)  -> ``<user-1>``...

``redact_text`` works on a string; ``redact_stream`` works line by line on big logs (nothing
redactable spans lines). :func:`check_redacted` / :func:`find_leaks` scan a text for any
known secret or any IP address that survived; publish refuses to upload when one does.
The placeholder mapping is kept locally (``Redactor.mapping()``), never published.

Example::

    r = Redactor(hosts=["10.11.0.2", "gpu-a.corp"], users=["alice"])
    r.redact_text("alice@gpu-a.corp:10.11.0.2")  # '<user-1>@<host-1>:<ip-1>'
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import IO, Any, Iterable, Mapping

from dlperf_tasks.errors import StoreError

# users too generic to identify anyone; redacting them would mangle every path (/root/...)
GENERIC_USERS = frozenset({"root"})

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
IPV4_RE = re.compile(rf"(?<![\d.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\d]|\.\d)")
# candidate IPv6 tokens: hex/colon runs with >= 2 colons (validated with ipaddress)
_IPV6_CAND_RE = re.compile(r"(?<![\w:.])\[?([0-9A-Fa-f:]*:[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*(?:%[\w.]+)?)\]?(?![\w:])")


def _is_ipv6(token: str) -> bool:
    # a digit is required: "a::b" / "dead::beef" are C++/Rust paths far more often than IPs
    if token.count(":") < 2 or not re.search(r"\d", token):
        return False
    try:
        ipaddress.IPv6Address(token.split("%", 1)[0])
        return True
    except ValueError:
        return False


def _terms_re(terms: Iterable[str], ignore_case: bool) -> re.Pattern | None:
    """One whole-word alternation (longest first) for many terms; None when there are none."""
    terms = sorted(set(terms), key=lambda t: (-len(t), t))
    if not terms:
        return None
    alt = "|".join(re.escape(t) for t in terms)
    return re.compile(rf"(?<![\w-])(?:{alt})(?![\w-])", re.IGNORECASE if ignore_case else 0)


def _term_re(term: str, ignore_case: bool) -> re.Pattern:
    # whole-word match: "node1" must not hit "node10" or "mynode1"; dots are boundaries so
    # "gpu-a" also hits "gpu-a.corp.example"
    return re.compile(rf"(?<![\w-]){re.escape(term)}(?![\w-])", re.IGNORECASE if ignore_case else 0)


@dataclass(frozen=True)
class Secrets:
    """What must not appear in a published object."""

    hosts: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    check_ips: bool = True

    def terms(self) -> list[tuple[str, str]]:
        return [("host", h) for h in self.hosts] + [("node", n) for n in self.names] + \
               [("user", u) for u in self.users]


def secrets_from_inventory(inventory: Any, names: bool = True) -> Secrets:
    """Hosts, node names and users of a cluster inventory: a ``remote.inventory.Cluster``,
    a YAML path, or its dict form (``{nodes: [{name, host, user, address}], defaults: {...}}``)."""
    if inventory is None:
        return Secrets()
    if isinstance(inventory, (str, bytes)) or hasattr(inventory, "__fspath__"):
        from dlperf_tasks.remote.inventory import Cluster

        try:
            inventory = Cluster.from_yaml(inventory)
        except Exception as exc:
            raise StoreError(f"redaction: cannot load inventory {inventory}: {exc}") from None
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
            v = get(n, k)
            if v:
                hosts.append(str(v))
        if names and get(n, "name"):
            node_names.append(str(get(n, "name")))
        u = get(n, "user") or get(n, "login")
        if u:
            users.append(str(u))
    return Secrets(hosts=_uniq(hosts), names=_uniq(node_names), users=_uniq(users))


def _uniq(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for i in items:
        i = i.strip()
        if i:
            seen.setdefault(i, None)
    return tuple(seen)


class Redactor:
    """Consistent placeholder substitution for one run (see module docstring).

    ``kinds``: which classes to redact, a subset of ``{"ips", "hostnames", "users"}``
    (node names count as hostnames); default all three."""

    KINDS = ("ips", "hostnames", "users")

    def __init__(self, hosts: Iterable[str] = (), names: Iterable[str] = (), users: Iterable[str] = (),
                 kinds: Iterable[str] | str | None = None):
        if isinstance(kinds, str):
            kinds = [k.strip() for k in kinds.split(",") if k.strip()]
            if kinds == ["none"]:
                kinds = []
        kinds = set(self.KINDS if kinds is None else kinds)
        unknown = kinds - set(self.KINDS)
        if unknown:
            raise StoreError(f"redaction: unknown kind(s) {sorted(unknown)}; known: {', '.join(self.KINDS)}")
        self.kinds = frozenset(kinds)
        self._maps: dict[str, dict[str, str]] = {"ip": {}, "host": {}, "node": {}, "user": {}}
        terms: list[tuple[str, str]] = []
        ip_hosts = []
        for h in _uniq(hosts):
            if _is_ip(h):
                ip_hosts.append(h)  # handled by the IP patterns (and seeded for numbering)
            else:
                terms.append(("host", h))
        for n in _uniq(names):
            if not _is_ip(n):
                terms.append(("node", n))
        for u in _uniq(users):
            if u not in GENERIC_USERS:
                terms.append(("user", u))
        hn = "hostnames" in self.kinds
        self.secrets = Secrets(
            hosts=tuple(h for h in _uniq(hosts) if (hn and not _is_ip(h)) or ("ips" in self.kinds and _is_ip(h))),
            names=_uniq(names) if hn else (),
            users=tuple(u for u in _uniq(users) if u not in GENERIC_USERS) if "users" in self.kinds else (),
            check_ips="ips" in self.kinds)
        wanted = {"host": "hostnames", "node": "hostnames", "user": "users"}
        # longest first so "gpu-a.corp" wins over "gpu-a"
        terms = [t for t in terms if wanted[t[0]] in self.kinds]
        order = list(terms)
        terms.sort(key=lambda t: -len(t[1]))
        self._ci_kind = {t.lower(): k for k, t in reversed(terms) if k != "user"}
        self._cs_kind = {t: k for k, t in reversed(terms) if k == "user"}
        self._ci_re = _terms_re([t for k, t in terms if k != "user"], ignore_case=True)
        self._cs_re = _terms_re([t for k, t in terms if k == "user"], ignore_case=False)
        self._ip_cache: dict[str, str] = {}
        # number the inventory first (in inventory order): the same cluster gets the same
        # placeholders in every run, so published runs stay comparable node by node
        if "ips" in self.kinds:
            for h in ip_hosts:
                self._placeholder("ip", _canon_ip(h))
        for kind, term in sorted(terms, key=lambda t: order.index(t)):
            self._placeholder(kind, term)

    @classmethod
    def from_inventory(cls, inventory: Any, kinds: Iterable[str] | str | None = None) -> "Redactor":
        s = secrets_from_inventory(inventory)
        return cls(hosts=s.hosts, names=s.names, users=s.users, kinds=kinds)

    @property
    def enabled(self) -> bool:
        return bool(self.kinds)

    def _placeholder(self, kind: str, value: str) -> str:
        m = self._maps[kind]
        canon = value.lower() if kind in ("host", "node", "ip") else value
        if canon not in m:
            m[canon] = f"<{kind}-{len(m) + 1}>"
        return m[canon]

    def mapping(self) -> dict[str, dict[str, str]]:
        """``{kind: {original: placeholder}}`` -- keep local, never publish."""
        return {k: dict(v) for k, v in self._maps.items() if v}

    def redact_text(self, text: str) -> str:
        if not self.kinds:
            return text
        if self._ci_re is not None:
            text = self._ci_re.sub(lambda m: self._placeholder(self._ci_kind[m.group(0).lower()], m.group(0)), text)
        if self._cs_re is not None:
            text = self._cs_re.sub(lambda m: self._placeholder(self._cs_kind[m.group(0)], m.group(0)), text)
        if "ips" in self.kinds:
            if ":" in text:
                text = _IPV6_CAND_RE.sub(self._sub_ipv6, text)
            text = IPV4_RE.sub(self._sub_ipv4, text)
        return text

    def _sub_ipv4(self, m: re.Match) -> str:
        raw = m.group(0)
        ph = self._ip_cache.get(raw)
        if ph is None:
            ph = self._ip_cache[raw] = self._placeholder("ip", _canon_ip(raw))
        return ph

    def _sub_ipv6(self, m: re.Match) -> str:
        token = m.group(1)
        if not _is_ipv6(token):
            return m.group(0)
        addr = token.split("%", 1)[0]
        canon = str(ipaddress.IPv6Address(addr))
        ph = self._placeholder("ip", canon)
        return m.group(0).replace(token, ph)

    def redact_stream(self, src: IO[str], dst: IO[str], block: int = 1 << 20) -> None:
        """Streaming: blocks of whole lines (~1 MiB), so memory stays small for multi-GB logs
        (nothing redactable spans a line break)."""
        while True:
            lines = src.readlines(block)
            if not lines:
                break
            dst.write(self.redact_text("".join(lines)))

    def redact_path(self, rel: str) -> str:
        """Redact each component of a relative path (a log named after a host must not leak it).
        Placeholders' ``<``/``>`` are turned into ``_`` to keep keys simple."""
        out = []
        for part in rel.split("/"):
            red = self.redact_text(part)
            if red != part:
                red = red.replace("<", "_").replace(">", "_")
            out.append(red)
        return "/".join(out)


@functools.lru_cache(maxsize=4096)
def _canon_ip(s: str) -> str:
    addr = ipaddress.ip_address(s.split("%", 1)[0])
    return str(addr)


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.split("%", 1)[0])
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=32)
def _leak_res(secrets: "Secrets") -> tuple[re.Pattern | None, re.Pattern | None, dict[str, str]]:
    kinds: dict[str, str] = {}
    ci, cs = [], []
    for kind, term in secrets.terms():
        if kind == "user":
            if term in GENERIC_USERS:
                continue
            cs.append(term)
            kinds.setdefault(term, kind)
        else:
            ci.append(term)
            kinds.setdefault(term.lower(), kind)
    return _terms_re(ci, True), _terms_re(cs, False), kinds


def find_leaks(text: str, secrets: Secrets | Iterable[str]) -> list[str]:
    """Secrets still present in ``text``: known hosts/names/users (whole-word) and, when
    ``secrets.check_ips``, any IPv4/IPv6 address. A plain list of strings is treated as hosts."""
    if not isinstance(secrets, Secrets):
        secrets = Secrets(hosts=_uniq(secrets))
    found: list[str] = []
    ci, cs, kinds = _leak_res(secrets)
    seen: set[str] = set()
    for rx, fold in ((ci, True), (cs, False)):
        if rx is None:
            continue
        for m in rx.finditer(text):
            term = m.group(0).lower() if fold else m.group(0)
            if term not in seen:
                seen.add(term)
                found.append(f"{kinds.get(term, 'host')} {m.group(0)!r}")
    if secrets.check_ips:
        m = IPV4_RE.search(text)
        if m:
            found.append(f"IPv4 address {m.group(0)!r}")
        if ":" in text:
            for m in _IPV6_CAND_RE.finditer(text):
                if _is_ipv6(m.group(1)):
                    found.append(f"IPv6 address {m.group(1)!r}")
                    break
    return found


def check_redacted(text: str, secrets: Secrets | Iterable[str], where: str = "text") -> None:
    """Raise StoreError naming ``where`` and what survived if ``text`` still holds a secret."""
    leaks = find_leaks(text, secrets)
    if leaks:
        raise StoreError(f"refusing to publish {where}: it still contains {', '.join(leaks)} "
                         f"(redaction incomplete)")
