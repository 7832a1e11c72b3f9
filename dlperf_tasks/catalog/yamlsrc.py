"""Read a YAML document and remember the line of every key, so catalog errors can point at it.

``parse_yaml(text, filename)`` returns ``(data, lines)`` where ``lines`` maps a key path such as
``("layouts", 3, "dp")`` to its 1-based line number. Duplicate mapping keys (which plain PyYAML
silently overwrites) and syntax errors raise :class:`CatalogError` with ``file:line``.
"""

from __future__ import annotations

from typing import Any

import yaml

from dlperf_tasks.errors import CatalogError

try:  # libyaml is ~10x faster; DAG parsing loads the catalog
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader

KeyPath = tuple  # of str (mapping keys) and int (list indices)


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
    finally:
        loader.dispose()
    return data, lines
