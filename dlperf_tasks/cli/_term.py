"""Terminal-safe text: what the CLI prints for people never drives the terminal.

Logs, result.json fields, file names and error messages can hold control sequences (an OSC
window title, ``ESC [2J`` clear screen, OSC-8 links, the C1 CSI ``\\x9b``, a carriage return that
overwrites the line before it). :func:`escape` turns every C0/C1 control character and DEL,
except newline and tab, into a visible ``\\u00NN`` escape; :class:`EscapingStream` applies it to
everything written to a stream, and the ``dlperf`` entry point wraps stdout and stderr in one
for the whole command. JSON stays valid JSON with the same content: ``json.dumps`` escapes
C0 characters itself, and ``\\u00NN`` is JSON's own escape for any C1 one left raw in a string.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import TextIO

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


#: printable ASCII, newline and tab: an ASCII text of only these holds nothing to escape
_PLAIN_ASCII = bytes(range(0x20, 0x7F)) + b"\n\t"


def escape(text: str) -> str:
    """``text`` with every C0/C1 control character (and DEL) but ``\\n`` and ``\\t`` as ``\\u00NN``."""
    text = str(text)
    if text.isascii() and not text.encode("ascii").translate(None, _PLAIN_ASCII):  # the usual case
        return text
    if text.isprintable():  # holds no control character (print() writes the newline on its own)
        return text
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class EscapingStream:
    """A text stream whose every write goes through :func:`escape` (other attributes: the
    wrapped stream's, so ``flush``, ``fileno``, ``isatty`` and ``encoding`` still work)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
    """For the duration: ``sys.stdout`` and ``sys.stderr`` escape control characters."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, EscapingStream) else EscapingStream(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
