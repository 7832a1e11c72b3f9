"""Redaction of published text: addresses, host/node/user names and credentials.

A :class:`Redactor` replaces, consistently within one run (the same input always gives the
same placeholder, numbered by first appearance):

* what the node facts say about every node (``remote.envcapture.node_identity``: OS host name,
  FQDN and its short forms, every interface address, MAC, InfiniBand GUID, the users that ran
  things), the inventory's hosts / node names / users, and the controller's own host name
  -> ``<host-N>``, ``<node-N>``, ``<user-N>``, ``<ip-N>``, ``<mac-N>``, ``<guid-N>``; names match
  case-insensitively and also when joined with ``_`` (``node1_rank0.log``);
* generic shapes (``store/redact_rules.py``), known or not: IPv4 (also after a dot), IPv6 (also
  NCCL's ``ib0:fe80::...%ib0``), EC2 names ``ip-10-20-30-40``, MACs, GUIDs, host names named by
  their context (NCCL line prefixes, OpenMPI's ``on node X``), private-domain FQDNs, ``/home/X``,
  ``user@host``;
* credentials, always (``kinds`` cannot switch them off): URL user info, ``*_SECRET*=``,
  ``*PASSWORD*:``, ``docker login -p``, bearer tokens, AWS key ids, private-key blocks
  -> ``<cred-N>`` / ``<private-key>``.

``redact_stream`` streams with bounded memory (1 MiB blocks; a line longer than that is cut at
a space). The pre-publish check is a different program: ``store/leakscan.py``. The mapping
(``Redactor.mapping()``) stays local; credentials appear in it only as a short hash.

Example::

    r = Redactor(hosts=["10.11.0.2", "gpu-a.corp"], users=["alice"])
    r.redact_text("alice@gpu-a.corp:10.11.0.2")  # '<user-1>@<host-1>:<ip-1>'
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from typing import IO, Any, Iterable, Mapping

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.store import redact_rules as R
from dlperf_tasks.store.redact_facts import (  # noqa: F401 - re-exported
    NODE_FACTS_FILE, NODE_IDENTITY_FILE, Secrets, _uniq, controller_identity, identity_terms, read_node_identities,
    secrets_from_inventory)

GENERIC_USERS = frozenset({"root", "nobody", "daemon"})
IPV4_RE = R.IPV4_RE
BLOCK = 1 << 20


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s.split("%", 1)[0])
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=4096)
def _canon_ip(s: str) -> str:
    return str(ipaddress.ip_address(s.split("%", 1)[0]))


class Redactor:
    """Consistent placeholder substitution for one run (see module docstring).

    ``kinds``: which identity classes to redact, a subset of ``{"ips", "hostnames", "users"}``
    (MACs/GUIDs count as ips, node names as hostnames); default all three. ``identities``:
    ``{node: node_identity(...)}`` from prepare. Credentials are always redacted."""

    KINDS = ("ips", "hostnames", "users")

    def __init__(self, hosts: Iterable[str] = (), names: Iterable[str] = (), users: Iterable[str] = (),
                 kinds: Iterable[str] | str | None = None, identities: Mapping[str, Mapping] | None = None,
                 controller: bool = False):
        if isinstance(kinds, str):
            kinds = [k.strip() for k in kinds.split(",") if k.strip()]
            if kinds == ["none"]:
                kinds = []
        kinds = set(self.KINDS if kinds is None else kinds)
        unknown = kinds - set(self.KINDS)
        if unknown:
            raise StoreError(f"redaction: unknown kind(s) {sorted(unknown)}; known: {', '.join(self.KINDS)}")
        self.kinds = frozenset(kinds)
        self._args = dict(hosts=tuple(hosts), names=tuple(names), users=tuple(users), identities=dict(identities or {}),
                          controller=controller)
        self._maps: dict[str, dict[str, str]] = {k: {} for k in ("ip", "host", "node", "user", "mac", "guid", "cred")}
        self._in_key = False
        hosts, users, extra = list(_uniq(hosts)), list(_uniq(users)), []
        idents = dict(identities or {})
        if controller:
            idents.setdefault("(controller)", controller_identity())
        for ident in idents.values():
            h, a, u, x = identity_terms(ident)
            hosts += h + a
            users += u
            extra += x
        ip_hosts = [h for h in _uniq(hosts) if _is_ip(h)]
        host_terms = [h for h in _uniq(hosts) if not _is_ip(h)]
        host_terms += [s for h in host_terms for s in R.short_names(h)]
        host_terms = [h for h in _uniq(host_terms) if R.usable_name(h)]
        name_terms = [n for n in _uniq(names) if not _is_ip(n) and R.usable_name(n)]
        user_terms = [u for u in _uniq(users) if u.lower() not in GENERIC_USERS and R.usable_name(u)]
        extra = list(_uniq(extra))
        hn, us, ip = "hostnames" in kinds, "users" in kinds, "ips" in kinds
        self.secrets = Secrets(hosts=tuple((host_terms if hn else []) + (ip_hosts if ip else [])),
                               names=tuple(name_terms) if hn else (), users=tuple(user_terms) if us else (),
                               check_ips=ip, extra=tuple(extra) if ip else ())
        terms: dict[str, str] = {}  # lower-case term -> kind; first kind wins (node names before hosts)
        for kind, group, on in (("node", name_terms, hn), ("host", host_terms, hn), ("user", user_terms, us),
                                ("mac", [e for e in extra if R.MAC_RE.fullmatch(e)], ip),
                                ("guid", [e for e in extra if not R.MAC_RE.fullmatch(e)], ip)):
            for t in group if on else ():
                terms.setdefault(t.lower(), kind)
        self._terms = terms
        alt = "|".join(re.escape(t) for t in sorted(terms, key=lambda t: (-len(t), t)))
        self._terms_re = re.compile(rf"(?i)(?<![A-Za-z0-9-])(?:{alt})(?![A-Za-z0-9-])") if terms else None
        self._terms_lc_re = re.compile(rf"(?<![a-z0-9-])(?:{alt})(?![a-z0-9-])") if terms else None
        # number the inventory first (in inventory order): the same cluster gets the same
        # placeholders in every run, so published runs stay comparable node by node
        if ip:
            for h in ip_hosts:
                self._placeholder("ip", _canon_ip(h))
        for t in list(name_terms if hn else []) + list(host_terms if hn else []) + list(user_terms if us else []):
            self._placeholder(terms[t.lower()], t)

    @classmethod
    def from_inventory(cls, inventory: Any, kinds: Iterable[str] | str | None = None,
                       identities: Mapping[str, Mapping] | None = None, controller: bool = False) -> "Redactor":
        s = secrets_from_inventory(inventory)
        return cls(hosts=s.hosts, names=s.names, users=s.users, kinds=kinds, identities=identities,
                   controller=controller)

    def with_identities(self, identities: Mapping[str, Mapping], controller: bool = True) -> "Redactor":
        """A new redactor with these node identities (and the controller's) added."""
        a = dict(self._args)
        a["identities"] = {**a["identities"], **dict(identities or {})}
        a["controller"] = a["controller"] or controller
        return Redactor(kinds=sorted(self.kinds) or "none", **a)

    def fresh(self) -> "Redactor":
        """The same knowledge, no placeholder handed out yet (for a trial redaction that must
        not change the numbering)."""
        return Redactor(kinds=sorted(self.kinds) or "none", **self._args)

    def known_values(self) -> list[str]:
        """Every exact name/address this redactor knows (for the independent leak scanner)."""
        s = self.secrets
        return [*s.hosts, *s.names, *s.users, *s.extra]

    @property
    def enabled(self) -> bool:
        return True  # credentials are always redacted

    def _placeholder(self, kind: str, value: str) -> str:
        m = self._maps[kind]
        canon = value if kind == "cred" else value.lower()
        if kind == "cred":
            canon = "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        if canon not in m:
            m[canon] = f"<{kind}-{len(m) + 1}>"
        return m[canon]

    def mapping(self) -> dict[str, dict[str, str]]:
        """``{kind: {original: placeholder}}`` -- keep local, never publish."""
        return {k: dict(v) for k, v in self._maps.items() if v}

    # ------------------------------------------------------------------ substitution
    def _group_sub(self, rx: re.Pattern, kind: str, group: str, text: str, keep_generic: bool = True) -> str:
        def repl(m: re.Match) -> str:
            val = m.group(group)
            if val is None or val.startswith("<") or (keep_generic and not R.usable_name(val)):
                return m.group(0)
            s, e = m.start(group) - m.start(0), m.end(group) - m.start(0)
            return m.group(0)[:s] + self._placeholder(kind, val) + m.group(0)[e:]

        return rx.sub(repl, text)

    def _sub_terms(self, text: str, low: str) -> str:
        """Known names, matched case-sensitively in the lower-cased text (faster than (?i)).
        A domain right after a known name (``<node>.corp.example.com``) goes with it: the
        placeholder is the name's, the domain is dropped."""
        lowered = len(low) == len(text)  # else lower() changed the length (rare non-ASCII): match (?i)
        out, pos = [], 0
        for m in (self._terms_lc_re.finditer(low) if lowered else self._terms_re.finditer(text)):
            if m.start() < pos:
                continue  # inside a domain already taken
            out.append(text[pos:m.start()])
            out.append(self._placeholder(self._terms[m.group(0).lower()], text[m.start():m.end()]))
            pos = R.domain_end(text, m.end())
        out.append(text[pos:])
        return "".join(out)

    def _cred_line(self, line: str) -> str:
        low = line.lower()
        for rx, markers in zip(R.CRED_RES, R.CRED_MARKERS):
            if any(mk in low for mk in markers):
                line = self._group_sub(rx, "cred", "c", line, keep_generic=False)
        return line

    def _sub_user_at_host(self, m: re.Match) -> str:
        u, h = m.group("u"), m.group("h")
        if "users" in self.kinds and R.usable_name(u):
            u = self._placeholder("user", u)
        if "hostnames" in self.kinds and R.usable_name(h) and not _is_ip(h):
            h = self._placeholder("host", h)
        return f"{u}@{h}"

    def _sub_ipv6(self, m: re.Match) -> str:
        cand = m.group(1)
        span = R.ipv6_span(cand)
        if span is None:
            return m.group(0)
        s, e = span
        ph = self._placeholder("ip", _canon_ip(cand[s:e]))
        return cand[:s] + ph + cand[e:] + (m.group(2) or "")

    def _sub_ipv4(self, m: re.Match) -> str:
        run = m.group(0)
        if R.ipv4_run(run):
            return self._placeholder("ip", _canon_ip(run))
        before = m.string[m.start() - 1] if m.start() else " "
        if run.count(".") == 4 and R.netstat_run(run) and not (before.isalnum() or before == "."):
            addr, _, port = run.rpartition(".")  # netstat's a.b.c.d.port
            return self._placeholder("ip", _canon_ip(addr)) + "." + port
        return run

    def _line_block(self, text: str) -> str:
        """Redact text that holds no private-key block boundary (rules run only when their
        cheap marker is in the block: the common training log skips most of them)."""
        low = text.lower()
        if "private key" in low:
            text = R.KEY_BLOCK_RE.sub("<private-key>", text)
            low = text.lower()
        if self._terms_re is not None:
            text = self._sub_terms(text, low)
            low = text.lower()
        if any(mk in low for mks in R.CRED_MARKERS for mk in mks):
            text = "".join(self._cred_line(line) for line in text.splitlines(keepends=True))
            low = text.lower()
        if "users" in self.kinds and ("/home/" in low or "/users/" in low or "/u/" in low):
            text = self._group_sub(R.HOME_USER_RE, "user", "u", text)
        if "@" in text and {"users", "hostnames"} & self.kinds:
            text = R.USER_AT_HOST_RE.sub(self._sub_user_at_host, text)
        if "hostnames" in self.kinds:
            for rx, markers in zip(R.CONTEXT_HOST_RES, R.CONTEXT_MARKERS):
                if markers is None or any(mk in low for mk in markers):
                    text = self._group_sub(rx, "host", "h", text)
            if any(sfx in low for sfx in R.PRIVATE_SUFFIXES):
                text = self._group_sub(R.PRIVATE_FQDN_RE, "host", "h", text)
        if "ips" in self.kinds:
            if "ip-" in low:
                text = R.DASHED_IP_RE.sub(lambda m: self._placeholder("ip", m.group(0)), text)
            if ":" in text:
                text = R.IPV6_CAND_RE.sub(self._sub_ipv6, text)
            if ":" in text or "-" in text:
                text = R.MAC_RE.sub(lambda m: self._placeholder("mac", m.group(0)), text)
            if "0x" in low or ":" in text:
                text = R.GUID_RE.sub(lambda m: self._placeholder("guid", m.group(0)), text)
            text = R.IPV4_CAND_RE.sub(self._sub_ipv4, text)
        return text

    def _block(self, text: str) -> str:
        """Redact a block of whole lines, tracking multi-line private-key blocks."""
        if not self._in_key and "-----BEGIN" not in text:
            return self._line_block(text)
        out = []
        for line in text.splitlines(keepends=True):
            if self._in_key:
                if R.KEY_END_RE.search(line):
                    self._in_key = False
                    out.append(self._line_block(R.KEY_END_RE.split(line, 1)[1]))
                continue
            m = R.KEY_BEGIN_RE.search(line)
            if m and not R.KEY_END_RE.search(line, m.end()):
                self._in_key = True
                out.append(self._line_block(line[:m.start()]) + "<private-key>")
                continue
            out.append(self._line_block(line))
        return "".join(out)

    def redact_text(self, text: str) -> str:
        self._in_key = False
        try:
            return self._block(text)
        finally:
            self._in_key = False

    def redact_stream(self, src: IO[str], dst: IO[str], block: int = BLOCK) -> None:
        """Streaming with bounded memory: ~``block`` characters at a time, cut after the last
        line break (or, in a line longer than ``block``, after its last space), never readlines."""
        self._in_key = False
        buf = ""
        while True:
            chunk = src.read(block)
            buf += chunk
            if not chunk:
                if buf:
                    dst.write(self._block(buf))
                break
            cut = buf.rfind("\n") + 1
            if cut == 0 and len(buf) >= block:
                cut = max(buf.rfind(" ", len(buf) // 2), buf.rfind("\t", len(buf) // 2)) + 1 or len(buf)
            if cut:
                dst.write(self._block(buf[:cut]))
                buf = buf[cut:]
        self._in_key = False

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


# ---------------------------------------------------------------------- legacy check (regex)
def _terms_re(terms: Iterable[str]) -> re.Pattern | None:
    terms = sorted(set(terms), key=lambda t: (-len(t), t))
    if not terms:
        return None
    return re.compile(rf"(?i)(?<![A-Za-z0-9-])(?:{'|'.join(re.escape(t) for t in terms)})(?![A-Za-z0-9-])")


def find_leaks(text: str, secrets: Secrets | Iterable[str]) -> list[str]:
    """Secrets still present in ``text``: known hosts/names/users (whole word, any case) and,
    when ``secrets.check_ips``, any IPv4/IPv6 address. A plain list of strings is treated as
    hosts. (The pre-publish check is ``store/leakscan.py``; this is a quick helper.)"""
    if not isinstance(secrets, Secrets):
        secrets = Secrets(hosts=_uniq(secrets))
    kinds = {t.lower(): k for k, t in reversed(secrets.terms())}
    found: list[str] = []
    rx = _terms_re([t for _, t in secrets.terms() if t.lower() not in GENERIC_USERS])
    seen: set[str] = set()
    for m in rx.finditer(text) if rx else ():
        if m.group(0).lower() not in seen:
            seen.add(m.group(0).lower())
            found.append(f"{kinds.get(m.group(0).lower(), 'host')} {m.group(0)!r}")
    if secrets.check_ips:
        m = IPV4_RE.search(text)
        if m:
            found.append(f"IPv4 address {m.group(0)!r}")
        for m in R.IPV6_CAND_RE.finditer(text) if ":" in text else ():
            span = R.ipv6_span(m.group(1))
            if span:
                found.append(f"IPv6 address {m.group(1)[span[0]:span[1]]!r}")
                break
    return found


def check_redacted(text: str, secrets: Secrets | Iterable[str], where: str = "text") -> None:
    """Raise StoreError naming ``where`` and what survived if ``text`` still holds a secret."""
    leaks = find_leaks(text, secrets)
    if leaks:
        raise StoreError(f"refusing to publish {where}: it still contains {', '.join(leaks)} "
                         f"(redaction incomplete)")
