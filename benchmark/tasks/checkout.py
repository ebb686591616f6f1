"""Tasks from a thinkingbox-data checkout: the test list plus the test files' docstring YAML.

The test files are Python, but they are only *parsed* (``ast``), never imported or executed: each test
function's first statement is a string starting with ``!`` whose remainder, dedented, is YAML with
``query``, ``user_context`` and ``init.<scenario>.{data_patch, golden_test_case, rubrics_yesno}``.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from benchmark.envs.errors import DataError
from benchmark.tasks.models import AnswerKey, Task

TEST_LIST = Path("releases") / "thinkingbox_bench_v1" / "testlist_thinkingbox_bench_v1.yaml"
RUBRIC_SUFFIX = "_rubrics_yesno"


def _bang_yaml(node: ast.AST, where: str) -> Any | None:
    body = getattr(node, "body", [])
    if not body or not isinstance(body[0], ast.Expr):
        return None
    value = body[0].value
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("!")):
        return None
    try:
        return yaml.safe_load(textwrap.dedent(value.value[1:]))
    except yaml.YAMLError as exc:
        raise DataError(f"{where}: invalid docstring YAML: {exc}") from exc


def parse_test_file(path: Path) -> tuple[str, dict[str, Any]]:
    """(scenario, {function name: docstring YAML}) of one test file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise DataError(f"{path}: not valid Python: {exc.msg} (line {exc.lineno})") from exc
    header = _bang_yaml(tree, str(path))
    if not isinstance(header, dict) or not isinstance(header.get("scenario"), str):
        raise DataError(f'{path}: missing module docstring """!\\nscenario: <name>\\n"""')
    tests: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            doc = _bang_yaml(node, f"{path}: {node.name}")
            if doc is not None:
                tests[node.name] = doc
    return header["scenario"], tests


def _find_file(root: Path, name: str) -> Path:
    matches = sorted((root / "dataset" / "test_case").rglob(name))
    if not matches:
        raise DataError(f"{root / TEST_LIST}: test file {name} not found under dataset/test_case")
    if len(matches) > 1:
        raise DataError(f"{root / TEST_LIST}: test file {name} is ambiguous: {[str(m) for m in matches]}")
    return matches[0]


def _task(root: Path, path: Path, scenario: str, test: str, doc: Any) -> Task:
    task_id = f"{path.name}:{test}"
    where = f"{path}: task {task_id}"
    if not isinstance(doc, dict):
        raise DataError(f"{where}: docstring YAML must be a mapping")
    unknown = sorted(set(doc) - {"query", "user_context", "init"})
    if unknown:
        raise DataError(f"{where}: unknown field {unknown[0]}")
    init = doc.get("init")
    if not isinstance(init, dict) or not isinstance(init.get(scenario), dict):
        raise DataError(f"{where}: field init.{scenario}: missing")
    server = init[scenario]
    patch = server.get("data_patch")
    if not isinstance(patch, dict):
        raise DataError(f"{where}: field init.{scenario}.data_patch: must be a mapping of table -> rows")
    golden = (server.get("golden_test_case") or {}).get("tool_interactions")
    if not isinstance(golden, list):
        raise DataError(f"{where}: field init.{scenario}.golden_test_case.tool_interactions: must be a list")
    stem = path.stem
    is_rubric = stem.endswith(RUBRIC_SUFFIX)
    try:
        return Task(
            id=task_id,
            domain=scenario,
            scenario=scenario,
            source_file=str(path.relative_to(root)),
            test_name=test,
            variant="rubrics_yesno" if is_rubric else "base",
            replaces=f"{stem.removesuffix(RUBRIC_SUFFIX)}.py:{test}" if is_rubric else None,
            query=doc.get("query"),  # type: ignore[arg-type]  # validated by Task
            user_context=doc.get("user_context"),  # type: ignore[arg-type]
            data_patch=patch,
            rubrics_yesno=server.get("rubrics_yesno"),
            checks=["db_hash", "rubrics_yesno"] if is_rubric else ["db_hash"],
            answer=AnswerKey(golden_tool_interactions=golden),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise DataError(f"{where}: field {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def iter_checkout(root: Path) -> Iterator[Task]:
    list_path = root / TEST_LIST
    try:
        entries = yaml.safe_load(list_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DataError(f"{list_path}: test list not found") from exc
    if not isinstance(entries, list) or not all(isinstance(e, str) and ":" in e for e in entries):
        raise DataError(f"{list_path}: must be a YAML list of '<file>.py:<test>' strings")
    parsed: dict[str, tuple[Path, str, dict[str, Any]]] = {}
    for entry in entries:
        file_name, _, test = entry.partition(":")
        if file_name not in parsed:
            path = _find_file(root, file_name)
            parsed[file_name] = (path, *parse_test_file(path))
        path, scenario, tests = parsed[file_name]
        if test not in tests:
            raise DataError(f"{path}: task {entry}: no test function {test} with a '!' docstring")
        yield _task(root, path, scenario, test, tests[test])
