"""Store and endpoint URLs that may carry credentials: the one check and the one rendering.

A URL given by a user (``--store``, ``$DLPERF_STORE_URL``, an S3 ``endpoint``) may hold a
secret: ``s3://KEY:SECRET@bucket/p``, ``file:///dir?password=...``,
``...?endpoint=http://u:p@host``. Two rules, used by every place that reads or prints one:

* :func:`credential_problem` says (in words that never repeat the URL) whether a URL carries
  credentials: user info before the host, or a credential-like query/fragment parameter
  (password, secret, token, key, signature, credential...), on any scheme, nested endpoint URLs
  included. Such a URL is refused.
* :func:`safe_url` is the only form that is printed, logged or written: scheme, host (and
  port), bucket and prefix, plus the non-secret store parameters (``endpoint`` itself rendered
  the same way, ``region``, ``addressing_style``...). User info, every other parameter and the
  fragment are dropped; control characters are percent-escaped so a URL cannot drive a terminal.
"""

from __future__ import annotations

import re
import urllib.parse

# a parameter whose (lower-cased) name contains one of these is a credential
CREDENTIAL_WORDS = ("password", "passwd", "pwd", "secret", "token", "key", "signature", "credential", "auth",
                    "session", "apikey", "sig", "pass", "private")
# the store parameters that are printed (values of other parameters never are)
SHOWN_PARAMS = ("endpoint", "endpoint_url", "region", "addressing_style", "conditional_writes",
                "connect_timeout", "read_timeout", "max_attempts")
_URL_PARAMS = ("endpoint", "endpoint_url")
# the conventional credential parameter names a refusal may name; any other name (a fragment's, a
# misspelt one: it may be the secret itself) is only called "a query parameter" / "the fragment"
NAMED_CREDENTIALS = ("password", "passwd", "pwd", "secret", "token", "key", "access_key", "secret_key",
                     "access_key_id", "secret_access_key", "session_token", "signature", "sig", "credential",
                     "x-amz-signature", "x-amz-credential", "x-amz-security-token", "apikey", "api_key", "auth")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,19}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MAX_NESTING = 3


def _split(url: str) -> urllib.parse.SplitResult | None:
    try:
        parts = urllib.parse.urlsplit(str(url).strip())
        parts.port  # noqa: B018 - raises ValueError on a malformed port
        return parts
    except ValueError:
        return None


def _params(text: str) -> list[tuple[str, str]]:
    try:
        return urllib.parse.parse_qsl(text, keep_blank_values=True)
    except ValueError:
        return [("?", text)]


def _is_credential(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in CREDENTIAL_WORDS)


def credential_problem(url: str, _depth: int = 0) -> str | None:
    """Why ``url`` may not be used (it carries credentials or cannot be read), else None. The
    reason never contains the URL or any part of it but a short, plain parameter name."""
    parts = _split(url)
    if parts is None:
        return "it cannot be parsed as a URL" if "@" not in str(url) else "it carries credentials (user:password@)"
    if "@" in parts.netloc:
        return "it carries credentials (user:password@ before the host)"
    where = [("query", n, v) for n, v in _params(parts.query)] + [("fragment", n, v) for n, v in _params(parts.fragment)]
    for part, name, value in where:
        if _is_credential(name):
            if part == "fragment":
                return "its fragment looks like credentials"
            if name.lower() in NAMED_CREDENTIALS:
                return f"its query parameter {name.lower()!r} looks like credentials"
            return "a query parameter looks like credentials"
        if "://" in value or "@" in value:
            if _depth >= _MAX_NESTING:
                return "it nests URLs too deeply"
            inner = credential_problem(value, _depth + 1)
            if inner:
                return f"its {name if name in _URL_PARAMS else 'nested'} URL: {inner}"
    return None


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: "%{:02X}".format(ord(m.group()) & 0xFF), text)


def safe_url(url: str | None, _depth: int = 0) -> str:
    """``url`` as it may be shown: scheme, host[:port], path (bucket and prefix) and the store's
    non-secret parameters; never user info, other parameters, a fragment or a control character."""
    if url is None:
        return "-"
    text = str(url)
    parts = _split(text)
    if parts is None:
        return "<unreadable URL>"
    if not parts.scheme:
        return _escape(text if not any(c in text for c in "@?#") else "<unreadable URL>")
    if "@" in parts.path or "://" in parts.path:
        return "<unreadable URL>"  # user info or another URL where the path should stand
    host = parts.netloc.rpartition("@")[2]
    shown = []
    for name, value in _params(parts.query):
        if name in SHOWN_PARAMS and not _is_credential(name):
            if "://" in value or "@" in value:
                value = safe_url(value, _depth + 1) if _depth < _MAX_NESTING else "<nested>"
            shown.append((name, value))
    query = ("?" + urllib.parse.urlencode(shown, safe=":/")) if shown else ""
    return _escape(f"{parts.scheme}://{host}{parts.path}{query}")


def refusal(url: str, what: str = "store URL") -> str | None:
    """The one-line refusal of ``url`` (shown in its safe form) when it carries credentials, else None."""
    problem = credential_problem(url)
    if not problem:
        return None
    hint = ("; give S3 keys through DLPERF_S3_ACCESS_KEY_ID/DLPERF_S3_SECRET_ACCESS_KEY or a connection, "
            "never in the URL") if "credential" in problem else ""
    return f"{what} {safe_url(url)} refused: {problem}{hint}"


#: The store URL schemes dlperf opens; settings checks a store URL against this very list and the
#: store opens exactly these. OSS and every other S3-compatible service are ``s3://`` with an
#: ``?endpoint=`` (``s3://bucket/prefix?endpoint=https://oss-cn-beijing.aliyuncs.com&addressing_style=virtual``).
STORE_SCHEMES = ("file", "s3")


def store_scheme(url: str) -> str:
    """The scheme of a store URL: ``file`` for a plain directory path (no ``://``)."""
    return url.partition("://")[0].lower() if "://" in url else "file"


def scheme_problem(url: str, what: str = "store URL") -> str | None:
    """The one-line refusal of a store URL whose scheme the store cannot open, else None."""
    scheme = store_scheme(url)
    if scheme in STORE_SCHEMES:
        return None
    named = f"{scheme + '://'!r}" if _SCHEME.fullmatch(scheme) else "(not a URL scheme)"
    return (f"{what} {safe_url(url)}: unsupported scheme {named}; use file:///dir (or a directory "
            f"path) or s3://bucket/prefix (OSS and other S3-compatible stores: s3://...?endpoint=https://...)")
