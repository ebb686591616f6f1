"""Module, class and function sizes, read from the source (nothing is imported to check; issue 18, 19).

- no module of ``guard`` or ``proxy`` is longer than ``MAX_MODULE_LINES`` (CONVENTIONS.md: a module
  past ~600 lines is usually two concepts);
- no function or method on the call path (``CALL_PATH``: the modules a guarded ``tools/call`` runs
  through) is longer than ``MAX_FUNCTION_LINES``;
- ``GuardSession`` and ``ProxySession`` are each shorter than ``MAX_SESSION_CLASS_LINES``.

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (decorators left out, its docstring
and nested functions counted). Run as a script, this file lists every function of ``guard`` and
``proxy`` over the limit, on the call path or not: ``python -m tests.test_code_size``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("guard", "proxy")
CALL_PATH = (
    "guard/session*.py",
    "guard/steps.py",
    "guard/inline.py",
    "guard/retry.py",
    "guard/txext/*.py",
    "proxy/server.py",
    "proxy/relay_lean.py",
    "proxy/sessions*.py",
    "proxy/session_*.py",
    "proxy/legs.py",
    "proxy/render.py",
    "proxy/lean_upstream.py",
    "proxy/lean_http.py",
    "proxy/upstream*.py",
)
"""The modules a guarded ``tools/call`` runs through (docs/proxy.md, "A guarded call")."""
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_SESSION_CLASS_LINES = 400
SESSION_CLASSES = (("guard/session.py", "GuardSession"), ("proxy/sessions.py", "ProxySession"))


@dataclass(frozen=True)
class Function:
    path: str  # relative to the repository, with "/"
    line: int
    name: str  # qualified within the module: "Class.method", "outer.inner"
    lines: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}: {self.lines} lines"


def functions_in(rel: str, source: str) -> list[Function]:
    """Every function and method of the module ``rel`` whose text is ``source``, nested ones too."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                lines = child.end_lineno - child.lineno + 1
                found.append(Function(rel, child.lineno, prefix + child.name, lines))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source, filename=rel), "")
    return found


def modules(root: Path = ROOT, patterns: tuple[str, ...] | None = None) -> list[Path]:
    """The packages' modules, or those matching ``patterns`` (globs relative to ``root``)."""
    if patterns is None:
        return [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    return sorted({p for pattern in patterns for p in root.glob(pattern)})


def long_functions(paths: list[Path], root: Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[Function]:
    """The functions in ``paths`` longer than ``limit`` lines, longest first."""
    found = [
        f
        for path in paths
        for f in functions_in(path.relative_to(root).as_posix(), path.read_text("utf-8"))
        if f.lines > limit
    ]
    return sorted(found, key=lambda f: -f.lines)


def long_modules(paths: list[Path], root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> list[str]:
    sizes = {path.relative_to(root).as_posix(): len(path.read_text("utf-8").splitlines()) for path in paths}
    return [f"{rel}: {n} lines" for rel, n in sizes.items() if n > limit]


def long_functions_in_source(source: str, limit: int = MAX_FUNCTION_LINES) -> list[Function]:
    return [f for f in functions_in("proxy/x.py", source) if f.lines > limit]


def class_lines(source: str, name: str) -> int:
    """The length of the top-level class ``name`` in ``source``; KeyError if there is none."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            assert node.end_lineno is not None
            return node.end_lineno - node.lineno + 1
    raise KeyError(name)


def test_call_path_is_known() -> None:
    """Every pattern names at least one module: a renamed module must not drop out of the check."""
    for pattern in CALL_PATH:
        assert list(ROOT.glob(pattern)), f"{pattern} names no module"


def test_no_long_function_on_the_call_path() -> None:
    found = long_functions(modules(patterns=CALL_PATH))
    assert [str(f) for f in found] == [], f"functions over {MAX_FUNCTION_LINES} lines on the call path"


def test_no_long_module() -> None:
    assert long_modules(modules()) == [], f"modules over {MAX_MODULE_LINES} lines: split by concept"


@pytest.mark.parametrize(("path", "name"), SESSION_CLASSES)
def test_session_classes_are_short(path: str, name: str) -> None:
    lines = class_lines((ROOT / path).read_text("utf-8"), name)
    assert lines < MAX_SESSION_CLASS_LINES, f"{path} {name}: {lines} lines"


def _function(name: str, lines: int, indent: str = "") -> str:
    """The text of a function ``lines`` lines long (its ``def`` included)."""
    return f"{indent}def {name}():\n" + "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))


def test_the_check_catches_a_long_function() -> None:
    """The check itself, on a source written for it: a 61-line method and a 61-line nested function
    (and so the function around it) are found, a 60-line function is not."""
    source = (
        _function("ok", MAX_FUNCTION_LINES)
        + "class C:\n"
        + _function("long", MAX_FUNCTION_LINES + 1, "    ")
        + "def outer():\n"
        + _function("inner", MAX_FUNCTION_LINES + 1, "    ")
        + "    return inner\n"
    )
    found = {f.name: f.lines for f in long_functions_in_source(source)}
    assert found == {"C.long": 61, "outer.inner": 61, "outer": 63}


def test_the_check_catches_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), "utf-8")
    (tmp_path / "guard" / "small.py").write_text("x = 1\n" * MAX_MODULE_LINES, "utf-8")
    assert long_modules(modules(tmp_path), tmp_path) == [f"guard/big.py: {MAX_MODULE_LINES + 1} lines"]


if __name__ == "__main__":
    for function in long_functions(modules()):
        on_path = any(Path(function.path).match(p) for p in CALL_PATH)
        print(f"{function}{'  (call path)' if on_path else ''}")
