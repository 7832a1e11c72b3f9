"""Exception hierarchy shared by every layer.

Every error names what was wrong (file, key, field, node) in its message so the
CLI and Airflow task logs can show it verbatim.
"""


class DlperfError(Exception):
    """Base class for all dlperf errors (the CLI prints these without a traceback)."""


class CatalogError(DlperfError):
    """A suite YAML is malformed or inconsistent. Message names file and key."""


class PlanError(DlperfError):
    """Overrides or params do not fit the suite (unknown topology, bad batch size...)."""


class LogParseError(DlperfError):
    """A log cannot be read at all (not: a log that is merely invalid/truncated)."""


class ExtractError(DlperfError):
    """A log tree holds no usable log."""


class StoreError(DlperfError):
    """Object store unreachable, bucket missing, checksum mismatch..."""


class RemoteError(DlperfError):
    """SSH / container runtime failure. Carries the node name when known."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node
