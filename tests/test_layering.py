"""The packages' layering and public surfaces, read from the source (nothing is imported to check).

- ``guard`` imports neither ``proxy`` nor ``benchmark``;
- ``proxy`` reaches ``benchmark`` only inside ``proxy.cli._mount_benchmark`` (docs/adr/001);
- no product package imports ``tests``;
- no module imports a private name (``_x``) of another top-level package, nor a private module of a
  third-party library, except the debts listed in ``KNOWN_PRIVATE`` (each to be removed, not added to);
- every package's ``__init__.py`` states ``__all__``, and ``guard``/``proxy`` resolve every name in it.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("guard", "proxy", "benchmark")
MOUNT = ("proxy/cli.py", "_mount_benchmark")
KNOWN_PRIVATE: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    path: str  # relative to the repository, with "/"
    line: int
    module: str  # the imported module, absolute
    names: tuple[str, ...]  # for "from m import a, b"; () for "import m"
    function: str | None  # the enclosing top-level function, if any


def imports_in(rel: str, source: str) -> list[Import]:
    """The absolute imports of the module ``rel`` (a repository path) whose text is ``source``."""
    found = []
    for top in ast.parse(source, filename=rel).body:
        function = top.name if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) else None
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                found += [Import(rel, node.lineno, alias.name, (), function) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = tuple(alias.name for alias in node.names)
                found.append(Import(rel, node.lineno, node.module, names, function))
    return found


def all_imports(packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    paths = [path for pkg in packages for path in sorted((ROOT / pkg).rglob("*.py"))]
    return [
        imp
        for path in paths
        for imp in imports_in(path.relative_to(ROOT).as_posix(), path.read_text("utf-8"))
    ]


def _top(module: str) -> str:
    return module.split(".")[0]


def layering_violations(imports: list[Import]) -> list[str]:
    problems = []
    for imp in imports:
        here, there = _top(imp.path.split("/")[0]), _top(imp.module)
        where = f"{imp.path}:{imp.line} imports {imp.module}"
        if here == "guard" and there in ("proxy", "benchmark"):
            problems.append(f"{where}: guard imports neither proxy nor benchmark")
        if here == "proxy" and there == "benchmark" and (imp.path, imp.function) != MOUNT:
            problems.append(f"{where}: proxy reaches benchmark only in {MOUNT[0]}:{MOUNT[1]}")
        if there == "tests":
            problems.append(f"{where}: product code does not import the tests")
    return problems


def private_imports(imports: list[Import]) -> set[tuple[str, str]]:
    """(file, what) for every private name imported across packages and every private module."""
    found = set()
    for imp in imports:
        here, there = imp.path.split("/")[0], _top(imp.module)
        if there in PACKAGES and there != here:
            found |= {(imp.path, f"{imp.module}.{n}") for n in imp.names if n.startswith("_")}
        private = [part for part in imp.module.split(".") if part.startswith("_") and not part.endswith("__")]
        if there not in PACKAGES and private:
            found.add((imp.path, imp.module))
    return found


def test_layering() -> None:
    assert layering_violations(all_imports()) == []


def test_no_private_name_crosses_a_package() -> None:
    found = private_imports(all_imports())
    assert found - KNOWN_PRIVATE == set(), "a private name or module imported across packages"
    assert KNOWN_PRIVATE - found == set(), "a listed debt is paid: remove it from KNOWN_PRIVATE"


@pytest.mark.parametrize(
    ("path", "source", "rule"),
    [
        ("guard/x.py", "from proxy.server import GuardProxy", "guard imports neither"),
        ("guard/x.py", "def f():\n    import benchmark.envs", "guard imports neither"),
        ("proxy/relay.py", "from benchmark.envs import Database", "proxy reaches benchmark only"),
        (
            "proxy/cli.py",
            "def check():\n    from benchmark.tasks import resolve_data",
            "only in proxy/cli.py",
        ),
        ("benchmark/x.py", "from tests.support.envs import call", "does not import the tests"),
    ],
)
def test_layering_check_catches_a_forbidden_import(path: str, source: str, rule: str) -> None:
    """The check itself, on a file written for it: it must fail on each forbidden import."""
    (problem,) = layering_violations(imports_in(path, source))
    assert rule in problem


def test_private_check_catches_a_private_name() -> None:
    imports = imports_in("proxy/x.py", "from guard.session import _Forwarded")
    imports += imports_in("guard/y.py", "from mcp.server._lowlevel import x")
    assert private_imports(imports) == {
        ("proxy/x.py", "guard.session._Forwarded"),
        ("guard/y.py", "mcp.server._lowlevel"),
    }


INITS = sorted(p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py"))


@pytest.mark.parametrize("init", INITS)
def test_every_package_states_its_public_names(init: str) -> None:
    tree = ast.parse((ROOT / init).read_text(encoding="utf-8"))
    targets = [
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    ]
    assert "__all__" in targets, f"{init} does not state __all__"


@pytest.mark.parametrize("package", ["guard", "proxy"])
def test_public_names_resolve(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert not name.startswith("_"), name
