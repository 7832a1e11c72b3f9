"""Exception hierarchy shared by every layer.

Every error names what was wrong (file, key, field, node) in its message so the
CLI and Airflow task logs can show it verbatim. Code that must tell failures apart
branches on the error's class (its kind), never on its message text: the class is
chosen where the condition is known (e.g. :class:`NotFoundError` vs other store errors).
"""


class DlperfError(Exception):
    """Base class for all dlperf errors (the CLI prints these without a traceback)."""


class CatalogError(DlperfError):
    """A suite YAML is malformed or inconsistent. Message names file and key."""


class PlanError(DlperfError):
    """Overrides or params do not fit the suite (unknown topology, bad batch size...)."""


class PlanTooLargeError(PlanError):
    """The overrides select more trials than one plan may hold."""


class LogParseError(DlperfError):
    """A log cannot be read at all (not: a log that is merely invalid/truncated)."""


class ExtractError(DlperfError):
    """A log tree holds no usable log."""


class StoreError(DlperfError):
    """Object store unreachable, bucket missing, checksum mismatch..."""


class NotFoundError(StoreError):
    """What a reader asked the store for is not there: no run with that id, a run without its
    manifest, a missing bucket (the results page answers 404; other store errors are 502).
    Not to be confused with ``store.backends.NotFound``, one missing key inside a backend."""


class InvalidRunIdError(StoreError):
    """A run id that cannot name any run (not one path-safe component): the results page answers 404."""


class RemoteError(DlperfError):
    """SSH / container runtime failure. Carries the node name when known."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node
