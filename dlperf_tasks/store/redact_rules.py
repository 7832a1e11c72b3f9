"""Generic redaction rules: what is address-, name- or credential-shaped in any log, whether
or not the node facts know it. Used by :class:`dlperf_tasks.store.redact.Redactor`.

Each rule is ``(kind, compiled regex, group)``: the text of ``group`` is replaced by a
placeholder of ``kind`` (``ip``, ``mac``, ``guid``, ``host``, ``user``, ``cred``). The
independent pre-publish check (``store/leakscan.py``) deliberately shares none of this.
"""

from __future__ import annotations

import ipaddress
import re

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# not preceded by a digit or "digit." (so "v1.2.3.4.5" stays), but "host.10.1.2.3" is an address
IPV4_RE = re.compile(rf"(?<!\d)(?<!\d\.){_OCTET}(?:\.{_OCTET}){{3}}(?!\d|\.\d)")
# fast candidate runs of 4+ dotted numbers; validated by ipv4_run() (exactly 4 octets)
IPV4_CAND_RE = re.compile(r"\d+\.\d+\.\d+\.\d+(?:\.\d+)*")
# EC2 / cloud style host names that spell an address: ip-10-20-30-40
DASHED_IP_RE = re.compile(rf"(?i)(?<![A-Za-z0-9])ip-{_OCTET}(?:-{_OCTET}){{3}}(?![0-9])")
# IPv6 candidates: hex/colon runs with >= 2 colons, not starting inside a word ("ib0:fe80::1"
# yields "fe80::1"), optional %zone; validated with ipaddress
IPV6_CAND_RE = re.compile(r"(?<![0-9A-Za-z.])(?=[0-9A-Fa-f:]*:[0-9A-Fa-f.]*:)([0-9A-Fa-f:][0-9A-Fa-f:.]*)"
                          r"(%[A-Za-z0-9_.-]+)?")
# MACs (6 bytes) and longer colon byte strings (20-byte IPoIB hardware addresses)
MAC_RE = re.compile(r"(?<![0-9A-Fa-f:-])[0-9A-Fa-f]{2}(?:([:-])[0-9A-Fa-f]{2})(?:\1[0-9A-Fa-f]{2}){4,18}"
                    r"(?![0-9A-Fa-f]|[:-][0-9A-Fa-f])")
# InfiniBand GUIDs: 0x + 16 hex digits, or four groups of four hex digits
GUID_RE = re.compile(r"(?<![0-9A-Za-z:])(?:0x[0-9A-Fa-f]{16}|[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){3})(?![0-9A-Za-z:])")

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*[A-Za-z0-9]|[A-Za-z0-9]"
# host names named by their context: NCCL's "<host>:<pid>:<tid> [rank] NCCL", OpenMPI's
# "on node X" / "on host X", "hostname: X", "Host: X"
CONTEXT_HOST_RES = [
    re.compile(rf"(?m)^\s*(?:\[[^\]\n]*\]:?\s*)?(?P<h>{_NAME}):\d+:\d+ \[\d+\]"),
    re.compile(rf"(?i)\bon (?:node|host|machine)s? (?P<h>{_NAME})"),
    re.compile(rf"(?m)^\[(?P<h>{_NAME}):\d+\] "),  # OpenMPI "[host:pid] 3 more processes ..."
    re.compile(rf"(?i)\b(?:host ?name|hostname|host|node ?name)\s*[:=]\s*\"?(?P<h>{_NAME})"),
]
# FQDNs in private/cloud-internal domains
PRIVATE_FQDN_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9_.-])(?P<h>[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\."
    r"(?:internal|local|localdomain|lan|corp|intra|intranet|cluster|home|private|ec2\.internal))(?![A-Za-z0-9-])")

# user names: home directories, user@host (not image digests "repo@sha256:")
HOME_USER_RE = re.compile(r"(?:/home|/Users|/u|/export/home|/nfs/home)/(?P<u>[A-Za-z0-9_][A-Za-z0-9_.-]*)")
USER_AT_HOST_RE = re.compile(rf"(?<![\w.+/-])(?P<u>[A-Za-z_][A-Za-z0-9_.-]{{0,31}})@(?P<h>(?!sha\d)(?:{_NAME}))")

# credentials: the secret part is replaced, the key name is kept
_SECRET_WORDS = r"(?:SECRET|PASSWORD|PASSWD|PASSPHRASE|PASSWORD_FILE|TOKEN|API_?KEY|ACCESS_?KEY|AUTH|CREDENTIALS?|SIGNATURE)"
CRED_RES = [
    # scheme://user:password@  (s3://KEY:SECRET@bucket, https://user:pass@host)
    # (a secret may hold '/' and '+', as AWS secret keys do; a port followed by a path is no secret)
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://(?P<c>[^/\s:@'\"]+:(?![0-9]*/)[^\s@'\"]+)@"),
    # scheme://token@ (a bare key as user info)
    re.compile(r"(?i)\b(?:s3|oss|gs|https?|ftp|redis|postgres(?:ql)?|mysql|amqp)://(?P<c>[^/\s:@'\"]{12,})@"),
    # KEY_NAME=value, "key_name": "value", key-name: value (not a unit such as "energy_j_per_token")
    re.compile(rf"(?i)(?<!per_){_SECRET_WORDS}(?![A-Za-z0-9])[\"']?[ \t]*[=:][ \t]*[\"']?(?P<c>[^\s\"',;&<>]+)"),
    # docker login -p X / --password X / --password=X
    re.compile(r"(?i)\blogin\b[^\n]*?\s(?:-p|--password)(?:\s+|=)['\"]?(?P<c>[^\s'\"]+)"),
    # generic --password / --token flags of any tool
    re.compile(r"(?i)\s--?(?:password|passwd|token|secret|api-key)(?:\s+|=)['\"]?(?P<c>[^\s'\"-][^\s'\"]*)"),
    # HTTP auth headers
    re.compile(r"(?i)\b(?:Bearer|Basic|Token)\s+(?P<c>[A-Za-z0-9._~+/=-]{8,})"),
    # AWS access key ids
    re.compile(r"(?<![A-Z0-9])(?P<c>(?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Z0-9])"),
]
# private key blocks: whole block on one line (JSON-escaped), or BEGIN/END on their own lines
KEY_BLOCK_RE = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
                          re.S)
KEY_BEGIN_RE = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
KEY_END_RE = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")

#: words that are never redacted as host or user names (too generic to identify anyone, and
#: redacting them would mangle the text)
GENERIC_NAMES = frozenset({
    "root", "nobody", "daemon", "localhost", "localhost.localdomain", "local", "host", "node", "nodes", "gpu",
    "gpus", "master", "worker", "server", "compute", "login", "admin", "user", "users", "default", "none",
    "true", "false", "null", "rank", "all", "any", "the", "and", "not", "for", "with", "that", "this", "each",
    "name", "hostname", "docker", "container", "ip", "ipv4", "ipv6", "eth0", "ib0", "lo", "git", "ssh", "http",
    "https", "s3", "socket", "net", "nccl", "mpi", "cuda", "python", "python3", "torch", "info", "warn",
    "error", "id", "port", "is", "a", "an", "of", "to", "in", "on", "at",
})


def netstat_run(run: str) -> bool:
    """netstat's ``a.b.c.d.port`` (BSD/macOS form): an IPv4 address and a port of 2 to 5 digits
    (``1.2.3.4.5`` stays a version: one-digit ports are too rare to tell them apart)."""
    addr, _, port = run.rpartition(".")
    return (ipv4_run(addr) and 2 <= len(port) <= 5 and port.isdigit() and port[0] != "0"
            and int(port) <= 65535)


#: a domain after a known name: ``<node>.corp.example.com`` (two labels or more, the last one
#: alphabetic like a top-level domain), or one private label (``<node>.cluster``); never a file
#: extension (``<node>.log``, ``<node>.rank0.txt``)
DOMAIN_AFTER_RE = re.compile(r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+(?![A-Za-z0-9-])")
FILE_SUFFIXES = frozenset({
    "log", "txt", "out", "err", "json", "yaml", "yml", "csv", "gz", "tgz", "tar", "zip", "bz2", "xz", "png", "jpg",
    "svg", "md", "py", "sh", "pid", "lock", "tmp", "bak", "old", "html", "xml", "npy", "pt", "pth", "ckpt", "bin",
    "conf", "cfg", "ini", "stderr", "stdout", "qdrep", "nsys", "sqlite", "part", "parquet", "pkl"})
_PRIVATE_LABELS = frozenset(s.lstrip(".") for s in (".internal", ".local", ".localdomain", ".lan", ".corp",
                                                    ".intra", ".intranet", ".cluster", ".home", ".private"))


def domain_end(text: str, pos: int) -> int:
    """Where the domain that follows a known host/node name at ``pos`` ends (``pos``: none)."""
    m = DOMAIN_AFTER_RE.match(text, pos)
    if not m:
        return pos
    labels = m.group(0)[1:].split(".")
    last = labels[-1].lower()
    if not last.isalpha() or last in FILE_SUFFIXES or any(lb.lower() in FILE_SUFFIXES for lb in labels):
        return pos
    if len(labels) >= 2 and len(last) >= 2 or len(labels) == 1 and last in _PRIVATE_LABELS:
        return m.end()
    return pos


def ipv4_run(run: str) -> bool:
    """A dotted run of numbers that is exactly one IPv4 address (``1.2.3.4.5`` is a version)."""
    parts = run.split(".")
    return len(parts) == 4 and all(len(p) <= 3 and int(p) <= 255 and (p == "0" or p[0] != "0" or len(p) == 1)
                                   for p in parts)


# prefilters: a rule runs on a block only when its cheap marker is in the lower-cased block
CRED_MARKERS = [("://",), ("://",), ("secret", "pass", "token", "apikey", "api_key", "access_key", "accesskey",
                                     "auth", "credential", "signature"),
                ("login",), ("-pass", "-token", "-secret", "-api-key"), ("bearer", "basic", "token"),
                ("akia", "asia")]
CONTEXT_MARKERS = [None, ("on node", "on host", "on machine"), None, ("host", "node")]
PRIVATE_SUFFIXES = (".internal", ".local", ".lan", ".corp", ".intra", ".cluster", ".home", ".private")


def is_ipv6(token: str) -> bool:
    if token.count(":") < 2 or not re.search(r"\d", token) and token.count(":") < 3:
        # "a::b" / "dead::beef" are C++/Rust paths far more often than IPs; three colons or
        # more ("fdab::cafe:beef", "abcd:ef::face") are addresses even without a decimal digit
        return False
    try:
        ipaddress.IPv6Address(token.split("%", 1)[0])
        return True
    except ValueError:
        return False


def ipv6_span(cand: str) -> tuple[int, int] | None:
    """The longest valid IPv6 address inside a candidate run (``eth0:fe80::1`` -> ``fe80::1``,
    ``fe80::1:22``: the whole run; ``[..]:22`` never reaches here with the port)."""
    starts = [0] + [i + 1 for i, ch in enumerate(cand) if ch == ":" and i + 1 < len(cand) and cand[i + 1] != ":"]
    for s in starts[:4]:
        end = len(cand)
        for _ in range(3):
            if is_ipv6(cand[s:end]):
                return s, end
            cut = cand.rfind(":", s, end)
            if cut <= s:
                break
            end = cut
    return None


def usable_name(name: str) -> bool:
    """A host/user name worth redacting: not an IP, not generic, at least 2 characters."""
    n = name.strip().lower()
    return len(n) >= 2 and n not in GENERIC_NAMES and not n.isdigit()


def short_names(name: str) -> list[str]:
    """``dgx-a100-017.hpc.example.com`` -> ``[dgx-a100-017, dgx-a100-017.hpc]`` (the forms a
    cluster prints besides the full name); nothing for an IP address or a generic label."""
    if not name or IPV4_RE.fullmatch(name) or ":" in name:
        return []
    labels = name.split(".")
    out = [".".join(labels[:i]) for i in range(1, len(labels))]
    return [s for s in out if usable_name(s) and len(s) >= 3]
