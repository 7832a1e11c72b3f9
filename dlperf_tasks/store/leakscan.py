"""The pre-publish leak scanner: an independent second opinion on what the redactor left.

It shares no pattern with ``store/redact.py`` / ``redact_rules.py``: each line is cut into
tokens and every token is classified by hand-written checks (``ipaddress`` for addresses,
character-class tests for MACs and GUIDs, key/value and flag inspection for credentials),
plus two exact lists: the *known* names and addresses of the nodes (node facts, inventory,
matched per token and per dot-prefix, any case) and *planted* secrets (the store's secret key,
registry and SSH passwords from the publishing process' environment, and every secret the
process resolved from connections and the inventory, :mod:`dlperf_tasks.core.resolved_secrets`;
matched as substrings and never echoed). Placeholders (``<ip-3>``, ``_host-1_``) are clean by definition.

    scanner = LeakScanner(known=["dgx-a100-017", "0c:42:a1:11:22:33"], planted=[secret])
    scanner.scan_line("peer 10.1.2.3")     # [("IPv4 address", "10.1.2.3")]
    scanner.check_file(path, "logs/x.log")  # StoreError "... logs/x.log line 7: IPv4 address '10.1.2.3'"

``scan_spool(spool, known, planted)`` checks every object of a publish spool (tarball members
included, object and member names too) and raises :class:`StoreError` naming the object and
line; publish stops before anything is uploaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import ipaddress
import os
import tarfile
import urllib.parse
from typing import IO, Iterable

from dlperf_tasks.core.errors import StoreError
from dlperf_tasks.core import resolved_secrets

_HEX = frozenset("0123456789abcdefABCDEF")
_SEPARATORS = " \t\r\n\"'`,;()[]{}<>=|"
_TABLE = str.maketrans({c: " " for c in _SEPARATORS})
_PLACEHOLDER_KINDS = ("ip", "host", "node", "user", "mac", "guid", "cred")
_SECRET_KEY_WORDS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "APIKEY", "API_KEY",
                     "ACCESS_KEY", "ACCESSKEY", "CREDENTIAL", "AUTH")
_SECRET_ENV_WORDS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN")
_BINARY_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".pdf", ".zip")
_SHAPE_CHARS = frozenset(".:-@/")
_NOT_A_HOST = frozenset({"localhost", "localhost.localdomain", "none", "null", "unknown", "n/a", "local", "true", "false"})
_PRIVATE_DOMAINS = (".internal", ".local", ".localdomain", ".lan", ".corp", ".intra", ".intranet", ".cluster",
                    ".home", ".private")
MAX_LINE = 1 << 20  # longer lines are scanned in pieces of this many characters


def _is_placeholder_word(word: str) -> bool:
    """``ip-3`` / ``host-12`` (what is left of ``<ip-3>`` after cutting at ``<>``) or ``_ip-3_``."""
    w = word.strip("_")
    kind, _, num = w.partition("-")
    return kind in _PLACEHOLDER_KINDS and num.isdigit()


def _ipv4(piece: str) -> bool:
    parts = piece.split(".")
    if len(parts) != 4:
        return False
    return all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts)


_NOT_DIGIT_DOT = str.maketrans({c: " " for c in map(chr, range(128)) if not (c.isdigit() or c == ".")})


def _ipv4_in(token: str) -> str | None:
    """An IPv4 address inside a token: runs of digits and dots, trimmed of leading/trailing dots;
    runs of more than four numbers (``1.2.3.4.5``, versions) are not addresses. Also EC2 names
    ``ip-10-20-30-40``."""
    if token.count(".") >= 3:
        for run in token.translate(_NOT_DIGIT_DOT).split():
            cand = run.strip(".")
            if ".." not in cand and _ipv4(cand):
                return cand
            addr, _, port = cand.rpartition(".")  # netstat's a.b.c.d.port (not v1.2.3.4.5)
            at = token.find(cand)
            if cand.count(".") == 4 and _ipv4(addr) and port.isdigit() and 2 <= len(port) <= 5 \
                    and int(port) <= 65535 and not (at > 0 and (token[at - 1].isalnum() or token[at - 1] == ".")):
                return cand
    low = token.lower()
    if "ip-" in low:
        nums = low.split("ip-", 1)[1].split("-")[:4]
        digits = [n[:len(n) - len(n.lstrip("0123456789"))] for n in nums]
        if len(nums) == 4 and all(d and int(d) <= 255 for d in digits) and all(d == n for d, n in zip(digits, nums[:3])):
            return "ip-" + "-".join(digits)
    return None


def _ipv6_in(token: str) -> str | None:
    colons = token.count(":")
    if colons < 2 or colons < 3 and not any(ch.isdigit() for ch in token):
        return None  # "dead::beef" is a C++ path; "fdab::cafe:beef" (3 colons) is an address
    body = token.split("%", 1)[0]
    pieces = body.split(":")
    for start in range(len(pieces)):
        cand = ":".join(pieces[start:])
        if start and pieces[start - 1] == "" and cand.startswith(":"):
            continue
        for end in range(len(cand), 0, -1):
            sub = cand[:end]
            if sub.count(":") < 2 or sub.endswith(":") and not sub.endswith("::"):
                continue
            try:
                ipaddress.IPv6Address(sub)
            except ValueError:
                continue
            return sub
    return None


def _domain_after_placeholder(line: str) -> str | None:
    """``<node-1>.corp.example.com`` / ``_host-2_.hpc.example.org``: what a name's redaction left
    of its FQDN (two labels or more after the placeholder, the last alphabetic; not a file name)."""
    for close in (">.", "_."):
        pos = line.find(close)
        while pos >= 0:
            opener = line.rfind("<" if close == ">." else "_", 0, pos)
            if opener >= 0 and _is_placeholder_word(line[opener + 1:pos]):
                rest = line[pos + 2:]
                end = 0
                while end < len(rest) and (rest[end].isalnum() or rest[end] in "-."):
                    end += 1
                labels = rest[:end].rstrip(".").split(".")
                if len(labels) >= 2 and labels[-1].isalpha() and len(labels[-1]) >= 2 \
                        and not any(lb.lower() in _FILE_WORDS for lb in labels) and all(labels):
                    return "." + ".".join(labels)
            pos = line.find(close, pos + 1)
    return None


_FILE_WORDS = frozenset({"log", "txt", "out", "err", "json", "yaml", "yml", "csv", "gz", "tgz", "tar", "zip", "png",
                         "md", "py", "sh", "pid", "lock", "tmp", "html", "xml", "bin", "stderr", "stdout", "part"})


def _hex_groups(token: str, sep: str) -> list[str]:
    return token.split(sep) if sep in token else []


def _mac_or_guid_in(token: str) -> tuple[str, str] | None:
    t = token.strip(".:-")
    low = t.lower()
    if low.startswith("0x") and len(t) == 18 and all(c in _HEX for c in t[2:]):
        return "InfiniBand GUID", t
    for sep in (":", "-"):
        groups = _hex_groups(t, sep)
        if len(groups) >= 6 and all(len(g) == 2 and all(c in _HEX for c in g) for g in groups):
            return "MAC address", t
        if len(groups) == 4 and all(len(g) == 4 and all(c in _HEX for c in g) for g in groups) and sep == ":":
            return "InfiniBand GUID", t
    return None


_CRED_HINTS = ("://", "login", "--pass", "--token", "bearer", "basic", "akia", "asia", "private key", "secret",
               "password", "passwd", "passphrase", "token", "apikey", "api_key", "access_key", "accesskey",
               "credential", "auth")


def _git_ref(tok: str) -> bool:
    """``owner/repo@<commit>[:path]`` or ``dir/file@<commit>``: a source named at a git commit (7 to
    40 hex digits after a path with a ``/``), as the data files name their sources; not user@host."""
    left, _, right = tok.partition("@")
    commit = right.split(":", 1)[0].rstrip(".,;)")
    return ("/" in left and 7 <= len(commit) <= 40
            and all(c in "0123456789abcdef" for c in commit.lower()))


def _credential(tokens: list[str], line: str) -> tuple[str, str] | None:
    low = line.lower()
    if not any(h in low for h in _CRED_HINTS):
        return None
    if "private key" in low and "-----begin" in low:
        return "private key block", "-----BEGIN ... PRIVATE KEY-----"
    for i, tok in enumerate(tokens):
        if "://" in tok and "@" in tok:
            userinfo = tok.split("://", 1)[1].split("@", 1)[0]
            if "/" not in userinfo and not _is_placeholder_word(userinfo) and userinfo:
                return "credentials in a URL", tok.split("://", 1)[0] + "://...@"
        if tok.lower() in ("-p", "--password", "--token", "--passwd") and "login" in low and i + 1 < len(tokens):
            if not _is_placeholder_word(tokens[i + 1]):
                return "password on a command line", tok + " ..."
        if tok.startswith("--password=") or tok.startswith("--token="):
            if not _is_placeholder_word(tok.split("=", 1)[1]):
                return "password on a command line", tok.split("=", 1)[0] + "=..."
        key = tok.rstrip(":").upper().replace("-", "_")
        if any(key.endswith(w) for w in _SECRET_KEY_WORDS) and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt == ":" and i + 2 < len(tokens):
                nxt = tokens[i + 2]
            if nxt != ":" and not _is_placeholder_word(nxt.lstrip(":")) and (
                    _followed_by_assignment(line, tok)):
                return "credential value", f"{tok.rstrip(':')}=..."
        if tok in ("Bearer", "Basic") and i + 1 < len(tokens) and len(tokens[i + 1]) >= 8 \
                and not _is_placeholder_word(tokens[i + 1]):
            return "authorization header", tok + " ..."
        if len(tok) == 20 and tok[:4] in ("AKIA", "ASIA") and tok.isalnum() and tok.isupper():
            return "AWS access key id", tok[:4] + "..."
    return None


def _followed_by_assignment(line: str, key: str) -> bool:
    """``KEY=value`` / ``"key": "value"`` / ``key: value`` (the key directly assigned)."""
    key = key.rstrip(":")
    pos = line.find(key)
    while pos >= 0:
        rest = line[pos + len(key):].lstrip("\"' \t")
        if rest[:1] in ("=", ":") and rest[1:].strip(" \t\"'"):
            return True
        pos = line.find(key, pos + 1)
    return False


class LeakScanner:
    """Token-level scan of text for address-, name- and credential-shaped leftovers."""

    def __init__(self, known: Iterable[str] = (), planted: Iterable[str] = ()):
        self.known = {k.strip().lower() for k in known if k and len(k.strip()) >= 2}
        self.planted = [p for p in dict.fromkeys(planted) if p and len(p) >= 4]
        self._bracket = False
        # longest first: a FQDN is reported rather than its short name
        self._known_list = sorted(self.known, key=len, reverse=True)

    def scan_line(self, line: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for secret in self.planted:
            if secret in line:
                found.append(("planted secret", f"({len(secret)} characters, not shown)"))
        known = self._known_in(line.lower())
        if known:
            found.append(("known node name or address", known))
        domain = _domain_after_placeholder(line)
        if domain:
            found.append(("domain after a redacted name", domain))
        tokens = line.translate(_TABLE).split()
        self._bracket = line.startswith("[")
        cred = _credential(tokens, line)
        if cred:
            found.append(cred)
        for i, tok in enumerate(tokens):
            if _is_placeholder_word(tok):
                continue
            hit = self._token(tok, tokens, i)
            if hit:
                found.append(hit)
        return found

    def _known_in(self, low: str) -> str | None:
        """A known name/address as a whole word of the lower-cased line (letters, digits and '-'
        around it end the word; '_', '.', '/', '@', ':' do not hide it)."""
        for term in self._known_list:
            pos = low.find(term)
            while pos >= 0:
                end = pos + len(term)
                before = low[pos - 1] if pos else " "
                after = low[end] if end < len(low) else " "
                if not (before.isalnum() or before == "-") and not (after.isalnum() or after == "-"):
                    return term
                pos = low.find(term, pos + 1)
        return None

    def _token(self, tok: str, tokens: list[str], i: int) -> tuple[str, str] | None:
        if tok == "on" and i + 2 < len(tokens) and tokens[i + 1].lower() in ("node", "host"):
            name = tokens[i + 2]
            if not _is_placeholder_word(name) and name[:1].isalnum() and not name.isdigit() \
                    and name.lower() not in _NOT_A_HOST:
                return "host name after 'on node'", name
            return None
        if not any(c in tok for c in _SHAPE_CHARS) and not tok[:2].lower() == "0x":
            return None  # a plain word or number: no address, key or host shape
        v4 = _ipv4_in(tok)
        if v4:
            return "IPv4 address", v4
        if ":" in tok:
            hw = _mac_or_guid_in(tok)
            if hw:
                return hw
            v6 = _ipv6_in(tok)
            if v6:
                return "IPv6 address", v6
        elif tok.lower().startswith("0x"):
            hw = _mac_or_guid_in(tok)
            if hw:
                return hw
        if "-" in tok and ":" not in tok:
            hw = _mac_or_guid_in(tok)
            if hw:
                return hw
        for home in ("/home/", "/Users/"):
            if home in tok:
                user = tok.split(home, 1)[1].split("/", 1)[0]
                if user and not _is_placeholder_word(user):
                    return "user name in a home directory", home + user
        if "@" in tok and "://" not in tok and not _git_ref(tok):
            user, _, host = tok.partition("@")
            user = user.rsplit("/", 1)[-1]
            if user and host and user[0].isalpha() and not host.lower().startswith("sha") \
                    and not (_is_placeholder_word(user) or user in ("root", "git")) \
                    and host[0].isalnum() and not _is_placeholder_word(host.split(":")[0]):
                return "user@host", tok
        if tok.lower() in ("host:", "hostname:", "host=", "hostname=") and i + 1 < len(tokens):
            name = tokens[i + 1]
            if not _is_placeholder_word(name) and name[:1].isalnum() and not name.isdigit() \
                    and name.lower() not in _NOT_A_HOST:
                return "host name after 'host:'", name
        if "." in tok and tok.lower().rstrip(".").endswith(_PRIVATE_DOMAINS):
            return "host in a private domain", tok
        if i == 0 and tok.count(":") == 1 and self._bracket:
            name, _, pid = tok.partition(":")
            if pid.isdigit() and any(c.isalpha() for c in name) and not _is_placeholder_word(name):
                return "host name of an OpenMPI [host:pid] notice", name
        if i == 0 and tok.count(":") >= 2:
            name, _, rest = tok.partition(":")
            if rest.replace(":", "").isdigit() and name[:1].isalnum() and any(c.isalpha() for c in name) \
                    and not _is_placeholder_word(name):
                return "host name prefix of an NCCL line", name
        return None

    # ------------------------------------------------------------------ files
    def scan_stream(self, f: IO[bytes], where: str) -> None:
        """Raise StoreError at the first finding, naming ``where`` and the line number."""
        text = io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="")
        n = 0
        while True:
            line = text.readline(MAX_LINE)  # bounded: a huge line comes in pieces
            if not line:
                return
            if line.endswith("\n") or not n:
                n += 1
            found = self.scan_line(line)
            if found:
                kind, what = found[0]
                raise StoreError(f"refusing to publish {where} (line {n}): {kind} {what!r} survived redaction "
                                 f"(the leak scanner found it; nothing was uploaded)")

    def check_file(self, path: str | os.PathLike, where: str) -> None:
        with open(path, "rb") as f:
            self.scan_stream(f, where)

    def check_name(self, name: str, where: str) -> None:
        found = self.scan_line(name.replace("/", " "))
        if found:
            kind, what = found[0]
            raise StoreError(f"refusing to publish {where}: its name contains {kind} {what!r}")


def _sha256(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
    return h.hexdigest()


def planted_from_environment(env: dict | None = None) -> list[str]:
    """Secret values of the publishing process (``*SECRET*``, ``*PASSWORD*``, ``*TOKEN*``...) and
    the secrets of the Airflow connections it could read (``AIRFLOW_CONN_*``: the registry and
    store connections dlperf uses among them), so the CLI refuses what the DAG path refuses."""
    env = os.environ if env is None else env
    plain = [v for k, v in env.items() if any(w in k.upper() for w in _SECRET_ENV_WORDS) and _secret_like(v)]
    conns = [c for k, v in env.items() if k.upper().startswith("AIRFLOW_CONN_") for c in connection_env_secrets(v)]
    return plain + conns


def connection_env_secrets(value: str) -> list[str]:
    """The password and secret extra fields of one ``AIRFLOW_CONN_*`` value, in either of Airflow's
    forms: a URI (``scheme://login:password@host:port/schema?extra_field=...&__extra__=<json>``)
    or JSON (``{"conn_type": ..., "password": ..., "extra": {...}}``). Nothing is returned for an
    unreadable value (Airflow itself refuses it)."""
    text = str(value or "").strip()
    found: list = []
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return []
        if isinstance(data, dict):
            found.append(data.get("password"))
            extra = data.get("extra")
            found += _extra_secrets(extra)
    else:
        try:
            parts = urllib.parse.urlsplit(text)
            found.append(urllib.parse.unquote(parts.password or ""))
            params = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        except ValueError:
            return []
        for name, val in params:
            found += _extra_secrets(val) if name == "__extra__" else ([val] if resolved_secrets.is_secret_field(name) else [])
    return [p for v in found if isinstance(v, str) for p in resolved_secrets.pieces(v)]


def _extra_secrets(extra) -> list:
    if isinstance(extra, str):
        try:
            extra = json.loads(extra or "{}")
        except ValueError:
            return []
    return [v for k, v in extra.items() if resolved_secrets.is_secret_field(k)] if isinstance(extra, dict) else []


def _secret_like(value: str) -> bool:
    """A value that can be a secret: 8+ characters, not a path, not the name of another variable,
    not a plain lower-case word (``*_PASSWORD_FILE=/run/x``, ``*_PASSWORD_ENV=REG_PW`` are pointers)."""
    v = value.strip()
    if len(v) < 8 or v[0] in "/~." or v.replace("_", "").isupper() or v.isalpha() and v.islower():
        return False
    return v.lower() not in ("password", "changeme", "required", "optional")


def scan_spool(spool, known: Iterable[str] = (), planted: Iterable[str] = ()) -> None:
    """Scan every object of a :class:`~dlperf_tasks.store.spool.Spool` (tarball members too)."""
    scanner = LeakScanner(known, list(planted) + planted_from_environment() + resolved_secrets.values())
    listed = {e["path"]: e["sha256"] for e in spool.manifest["objects"]}
    for e in spool.manifest["objects"]:
        rel = e["path"]
        scanner.check_name(rel, f"object {rel!r}")
        path = spool.file(rel)
        if rel.endswith(".tar.gz"):
            with tarfile.open(path, "r:gz") as tar:
                for m in tar:
                    scanner.check_name(m.name, f"{rel} member {m.name!r}")
                    if m.isfile() and listed.get(m.name) != _sha256(tar.extractfile(m)):
                        scanner.scan_stream(tar.extractfile(m), f"{rel}:{m.name}")
            continue
        if rel.lower().endswith(_BINARY_SUFFIXES):
            continue
        scanner.check_file(path, rel)
