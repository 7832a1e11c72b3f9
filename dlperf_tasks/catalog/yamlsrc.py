"""Read a YAML document and remember the line of every key, so catalog errors can point at it.

``parse_yaml(text, filename)`` returns ``(data, lines)`` where ``lines`` maps a key path such as
``("layouts", 3, "dp")`` to its 1-based line number. Duplicate mapping keys (which plain PyYAML
silently overwrites) and syntax errors raise :class:`CatalogError` with ``file:line``.

Hostile files are refused BEFORE any node is composed or constructed, by one pass over the
parser's event stream (libyaml's parser keeps its own stack, it does not recurse): size
(:data:`MAX_BYTES`), nesting depth (:data:`MAX_DEPTH`; depth 30000 used to segfault the C
composer), alias expansion (:data:`MAX_NODES` nodes once every alias is expanded: a 2.6 KB
billion-laughs file used to take 1.5 GB), recursive aliases, and over-long scalars / numbers
(a 5000-digit integer used to raise Python's int-conversion ValueError as a traceback).
"""

from __future__ import annotations

from typing import Any

import yaml

from dlperf_tasks.core.errors import CatalogError

try:  # libyaml is much faster; DAG parsing loads the catalog
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader

KeyPath = tuple  # of str (mapping keys) and int (list indices)

MAX_BYTES = 256 * 1024  # the largest built-in suite is ~7 KB
MAX_DEPTH = 32  # nesting of mappings/sequences (the suites need 4)
MAX_NODES = 50_000  # nodes after expanding every alias
MAX_SCALAR = 16 * 1024  # characters in one scalar
MAX_NUMBER_DIGITS = 32  # digits in a plain (unquoted) number
_NUMBER_CHARS = frozenset("0123456789_+-.eExXoObBabcdefABCDEF:")


def check_limits(text: str, filename: str) -> None:
    """Refuse a document that is too big, too deep, expands too far through aliases, has a
    recursive alias or an over-long scalar, naming ``file:line``; nothing is built."""
    if len(text) > MAX_BYTES:
        raise CatalogError(f"{filename}: file is {len(text)} bytes; a suite file may have at most {MAX_BYTES}")
    loader = _Loader(text)
    sizes: dict[str, int] = {}  # anchor -> expanded node count
    stack: list[list] = []  # [anchor, node count so far]
    total = 0
    try:
        while True:
            ev = loader.get_event()
            if ev is None or isinstance(ev, yaml.StreamEndEvent):
                return
            line = ev.start_mark.line + 1 if ev.start_mark else 0
            where = f"{filename}:{line}"
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(stack) >= MAX_DEPTH:
                    raise CatalogError(f"{where}: nesting deeper than {MAX_DEPTH} levels (refused before parsing)")
                stack.append([ev.anchor, 1])
                continue
            if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, n = stack.pop()
                if anchor:
                    sizes[anchor] = n
                if stack:
                    stack[-1][1] += n
                else:
                    total += n
            elif isinstance(ev, yaml.AliasEvent):
                if ev.anchor not in sizes:
                    open_anchors = {a for a, _ in stack}
                    what = "recursive alias" if ev.anchor in open_anchors else "undefined alias"
                    raise CatalogError(f"{where}: {what} *{ev.anchor} (refused)")
                n = sizes[ev.anchor]
                if stack:
                    stack[-1][1] += n
                else:
                    total += n
            elif isinstance(ev, yaml.ScalarEvent):
                _check_scalar(ev, where)
                if ev.anchor:
                    sizes[ev.anchor] = 1
                if stack:
                    stack[-1][1] += 1
                else:
                    total += 1
            else:
                continue
            if total + sum(n for _, n in stack) > MAX_NODES:
                raise CatalogError(f"{where}: more than {MAX_NODES} values once aliases are expanded "
                                   f"(alias bomb?); refused before building anything")
    except yaml.MarkedYAMLError:
        return  # syntax errors are reported by parse_yaml with their own line
    finally:
        loader.dispose()


def _check_scalar(ev: yaml.ScalarEvent, where: str) -> None:
    v = ev.value
    if len(v) > MAX_SCALAR:
        raise CatalogError(f"{where}: a value of {len(v)} characters; at most {MAX_SCALAR} are allowed")
    if not ev.style and len(v) > MAX_NUMBER_DIGITS and set(v) <= _NUMBER_CHARS and any(c.isdigit() for c in v):
        digits = sum(c.isdigit() for c in v)
        if digits > MAX_NUMBER_DIGITS:
            raise CatalogError(f"{where}: number with {digits} digits is too large (at most {MAX_NUMBER_DIGITS})")


def format_path(path: KeyPath) -> str:
    """``("layouts", 3, "dp")`` -> ``layouts[3].dp``; the empty path -> ``(top level)``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _walk(node: yaml.Node, path: KeyPath, lines: dict, filename: str) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise CatalogError(
                    f"{filename}:{line}: {format_path(path + (key,))}: duplicate key "
                    f"(first defined on line {seen[key]})"
                )
            seen[key] = line
            _walk(value_node, path + (key,), lines, filename)
            lines[path + (key,)] = line  # point at the key, not at its value
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), lines, filename)


def parse_yaml(text: str, filename: str) -> tuple[Any, dict]:
    """Parse one YAML document; errors name ``filename`` and the line."""
    check_limits(text, filename)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise CatalogError(f"{filename}: file is empty (expected a mapping with id, framework, ...)")
        lines: dict = {}
        _walk(node, (), lines, filename)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}" if mark else filename
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise CatalogError(f"{where}: malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{filename}: malformed YAML: {exc}") from None
    except (ValueError, RecursionError, OverflowError) as exc:  # a last net: never a traceback
        raise CatalogError(f"{filename}: unreadable value: {str(exc)[:200]}") from None
    finally:
        loader.dispose()
    return data, lines
