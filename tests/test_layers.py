"""The layers' dependency rules (docs/design.md): no import cycle between our modules, and
the service layer loads without the web framework or the plotting library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("estimator", "profiles", "api", "migrations")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _first_party_imports(path: Path, modules: set[str]) -> set[str]:
    """Every first-party module ``path`` imports, at module level or inside a function
    (absolute imports only: the code has no relative ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def _import_graph() -> dict[str, set[str]]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _first_party_imports(p, modules) - {_module_name(p)} for p in files}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):
                continue  # a package re-exporting its own submodules is not a cycle
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_module_imports_itself_back() -> None:
    graph = _import_graph()
    assert "estimator.errors" in graph["api.problems"]  # the graph sees real imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_would_be_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("module", ["api.scenario", "api.services"])
def test_the_service_layer_loads_without_web_or_plotting_libraries(module: str) -> None:
    services = sorted(p.stem for p in (ROOT / "api" / "services").glob("[!_]*.py"))
    targets = [module] if module == "api.scenario" else [f"api.services.{s}" for s in services]
    code = (
        "import importlib, sys\n"
        f"for name in {targets!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in ('fastapi', 'starlette', 'matplotlib') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert len(targets) >= 1 and result.stdout.strip() == "[]", result.stdout + result.stderr
