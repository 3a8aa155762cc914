"""The package's shape: the import-linter contracts hold, no import loops, small modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "BROKEN" not in p.stdout and p.stdout.count("KEPT") >= 5


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on.add(m)
        for n in graph.find_modules_directly_imported_by(m) & modules:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in on:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            comp = []
            while True:
                n = stack.pop()
                on.discard(n)
                comp.append(n)
                if n == m:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return out


def test_the_import_graph_has_no_loop() -> None:
    graph = grimp.build_graph("edgespec", "edgespec_tui", cache_dir=None)
    # the package roots re-export their children; a loop through an __init__ is not one
    modules = {m for m in graph.modules if m.startswith(("edgespec", "edgespec_tui"))}
    modules -= {m for m in modules if any(c.startswith(m + ".") for c in modules)}
    assert _cycles(graph, modules) == []


def test_no_frontend_imports_the_cli() -> None:
    graph = grimp.build_graph("edgespec", "edgespec_tui", cache_dir=None)
    importers = graph.find_modules_that_directly_import("edgespec.frontends.cli")
    assert importers == set()


def test_no_module_is_over_400_lines() -> None:
    big = {
        str(p.relative_to(ROOT)): n
        for folder in ("edgespec", "tui")
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert big == {}


def test_the_loop_finder_finds_a_loop() -> None:
    """The negative control: a graph with a loop must be caught."""
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c", "d"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert _cycles(graph, {"a", "b", "c", "d"}) == [["a", "b", "c"]]


def test_llama_cpp_loads_before_numpy() -> None:
    # on a CUDA build (an H200 machine, numpy 2.5 from PyPI) every model load segfaulted when
    # numpy had been imported before llama_cpp, and none did the other way round (stop 38)
    code = (
        "import sys\n"
        "seen = []\n"
        "class Log:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        seen.append(name)\n"
        "sys.meta_path.insert(0, Log())\n"
        "import edgespec\n"
        "print(seen.index('llama_cpp') < seen.index('numpy'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
