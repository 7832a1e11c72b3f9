"""The layout (docs/architecture.md): the packages of ``dlperf_tasks`` form layers, and a
package imports only packages of lower layers. The graph is read from the source with ``ast``:
imports inside functions count, and so do module names given as strings to ``lazy_module`` /
``importlib.import_module``. Our own modules are imported at the top of a module; only the CLI's
command modules and the scheduler layer (start-up and DAG-parse time) import them lazily. Inside a
package, the modules import each other without a circle (a function-level import does not hide one)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "dlperf_tasks"

#: lowest first; packages in one tuple share a layer and never import each other
LAYERS: list[tuple[str, ...]] = [
    ("core",), ("policy",), ("frameworks",), ("catalog",), ("measure",), ("report",), ("store", "remote"),
    ("telemetry",), ("history",), ("engine",), ("web",), ("cli",), ("airflow",),
]
#: stand-alone programs inside the package (run on nodes or as a stand-in trainer): import no dlperf module
PROGRAMS = ("smoke",)
#: loose modules allowed at the top of dlperf_tasks/
LOOSE = {"__init__", "__main__"}
#: where our own modules may be imported inside a function (lazily): per-command start-up, DAG parse time
LAZY_OK = ("cli", "airflow")
MAX_LINES = 500

_MODULE_STR = re.compile(r"^dlperf_tasks(\.[a-z_][a-z0-9_]*)+(:\w+)?$")


def _rank() -> dict[str, int]:
    return {p: i for i, layer in enumerate(LAYERS) for p in layer}


def _part(module: str) -> str | None:
    bits = module.split(".")
    if bits[0] != "dlperf_tasks" or len(bits) < 2:
        return None
    return bits[1]


def _sources():
    for p in sorted(PKG.rglob("*.py")):
        yield p, ast.parse(p.read_text(), str(p))


def _imports(tree: ast.Module):
    """(target module, line, inside a function) for every import of ours, strings included."""
    inner: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner |= {id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                yield a.name, n.lineno, id(n) in inner
        elif isinstance(n, ast.ImportFrom):
            assert n.level == 0, f"line {n.lineno}: relative import (write dlperf_tasks.<package>...)"
            if n.module == "dlperf_tasks":  # from dlperf_tasks import frameworks
                for a in n.names:
                    yield f"dlperf_tasks.{a.name}", n.lineno, id(n) in inner
            elif n.module:
                yield n.module, n.lineno, id(n) in inner
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and _MODULE_STR.match(n.value):
            yield n.value.split(":")[0], n.lineno, True


def _edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path, tree in _sources():
        rel = path.relative_to(PKG)
        src = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for target, line, _ in _imports(tree):
            dst = _part(target)
            if dst and dst != "__version__" and dst != src:
                out[(src, dst)].append(f"{path.relative_to(ROOT)}:{line}")
    return out


def test_every_package_has_a_layer_and_few_loose_modules():
    rank = _rank()
    parts = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert parts - set(rank) - set(PROGRAMS) == set(), "a new package: give it a layer in LAYERS and docs/architecture.md"
    loose = {p.stem for p in PKG.glob("*.py")}
    assert loose <= LOOSE, f"loose modules at the top of dlperf_tasks/: {sorted(loose - LOOSE)}"


def test_imports_point_down_the_layers_only():
    rank = _rank()
    wrong = []
    for (src, dst), where in sorted(_edges().items()):
        if src in LOOSE:
            continue
        if src in PROGRAMS or dst in PROGRAMS:
            wrong.append(f"{src} -> {dst} (a stand-alone program imports and is imported by nothing): {where[0]}")
        elif rank[dst] >= rank[src]:
            how = "a sibling" if rank[dst] == rank[src] else "a higher layer"
            wrong.append(f"{src} -> {dst} ({how}): {', '.join(where[:3])}")
    assert wrong == []


def test_no_two_packages_import_each_other_even_through_a_ring():
    graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in _edges():
        graph[src].add(dst)

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            n = todo.pop()
            for m in graph[n] - seen:
                if m == b:
                    return True
                seen.add(m)
                todo.append(m)
        return False

    rings = sorted({tuple(sorted((a, b))) for a in list(graph) for b in graph[a] if reaches(b, a)})
    assert rings == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """module -> the modules of its own package it imports (package ``__init__`` files left out:
    they only gather names for callers outside the package)."""
    modules = {_module_name(p) for p in PKG.rglob("*.py") if p.name != "__init__.py"}
    graph: dict[str, set[str]] = defaultdict(set)
    for path, tree in _sources():
        src = _module_name(path)
        if src not in modules:
            continue
        package = src.rsplit(".", 1)[0]
        for n in ast.walk(tree):
            targets: list[str] = []
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module:
                targets = [f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in modules else n.module
                           for a in n.names]
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and _MODULE_STR.match(n.value):
                targets = [n.value.split(":")[0]]
            graph[src] |= {t for t in targets if t in modules and t != src and t.rsplit(".", 1)[0] == package}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        part.append(m)
                        if m == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return sorted(found)


def test_circle_finder_sees_a_ring_of_three_and_not_a_chain():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_inside_a_package():
    assert _circles(_module_graph()) == [], "modules of one package import each other in a circle"


def test_own_modules_imported_at_module_top_outside_cli_and_scheduler():
    lazy = []
    for path, tree in _sources():
        rel = path.relative_to(PKG)
        if rel.parts[0] in LAZY_OK:
            continue
        text = path.read_text().splitlines()
        for target, line, inside in _imports(tree):
            if inside and _part(target) not in (None, rel.parts[0]) and "# lazy:" not in text[line - 1]:
                lazy.append(f"{path.relative_to(ROOT)}:{line} {target}")
    assert lazy == [], "import it at the top (or say why on the line: '# lazy: <reason>')"


def test_no_module_over_the_size_limit():
    big = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}


def test_architecture_doc_lists_the_layers_in_order():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\|\s*(\d+)\s*\|([^|]+)\|", doc, flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(len(LAYERS)))
    assert [tuple(re.findall(r"`([a-z_]+)`", cell)) for _, cell in rows] == LAYERS
