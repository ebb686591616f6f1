"""The generated row and input Protocols (benchmark.envs.typegen) match what the tools really receive.

mypy checks the tool code against ``rows.py`` / ``inputs.py``; these tests check those files against
the run-time models: the files are what the bundle's models render to, every tool implementation
annotates ``args`` with its own tool's input Protocol, and every TableRef names the table whose row
Protocol it carries.
"""

from __future__ import annotations

import datetime as dt
import enum
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, create_model

from benchmark.envs import DOMAINS, Domain, load_domain
from benchmark.envs.typegen import ZENDESK, ProtocolModule, expected_files, input_class, stale_files
from benchmark.tasks import BenchData

ROOT = Path(__file__).resolve().parents[3]
_TABLE_REF = re.compile(r"TableRef\[(\w+)\]")


@pytest.fixture(scope="module", params=sorted(DOMAINS))
def any_domain(request: pytest.FixtureRequest, bench: BenchData) -> Domain:
    name: str = request.param
    return load_domain(name, bench.bundle)


def test_generated_files_match_the_bundle(bench: BenchData) -> None:
    stale = stale_files(ROOT, expected_files(bench.bundle))
    assert stale == [], f"regenerate with `python -m benchmark.envs.typegen`: {stale}"


def _implementation(fn: Callable[..., Any]) -> Callable[..., Any]:
    while isinstance(fn, partial):
        fn = fn.func
    return fn


def test_each_tool_takes_its_own_input_protocol(any_domain: Domain) -> None:
    package = DOMAINS[any_domain.name]
    checked = 0
    for name, tool in any_domain.tools.items():
        fn = _implementation(tool.run)
        owner = "benchmark.envs.zendesk" if name.startswith(ZENDESK + "_") else package
        if not fn.__module__.startswith(owner + "."):
            continue  # search_policy: benchmark.envs.search reads its input through model_dump()
        annotation = inspect.signature(fn).parameters["args"].annotation
        assert annotation == input_class(name), f"{fn.__module__}.{fn.__name__} takes {annotation}"
        assert hasattr(importlib.import_module(owner + ".inputs"), annotation)
        checked += 1
    assert checked >= len(any_domain.tools) - 1


def _table_refs(package: str) -> list[tuple[str, str, Any]]:
    """(module.NAME, row Protocol, value) of every module-level TableRef annotation in a package."""
    refs = []
    root = importlib.import_module(package)
    for info in pkgutil.iter_modules(root.__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for attr, annotation in getattr(module, "__annotations__", {}).items():
            match = _TABLE_REF.fullmatch(str(annotation))
            if match:
                refs.append((f"{module.__name__}.{attr}", match.group(1), getattr(module, attr)))
    return refs


def test_each_table_ref_carries_its_tables_row_protocol(any_domain: Domain) -> None:
    refs = _table_refs(DOMAINS[any_domain.name]) + _table_refs("benchmark.envs.zendesk")
    assert refs
    for where, protocol, table in refs:
        assert table in any_domain.tables, f"{where}: no table {table!r}"
        assert any_domain.tables[table].model_name == protocol, f"{where}: {table} rows are not {protocol}"


class _Kind(enum.StrEnum):
    A = "a"


class _Plain(enum.Enum):
    A = "a"


def test_a_model_renders_as_a_protocol_with_its_field_types() -> None:
    inner = create_model("Inner", code=(str, ...))
    other = create_model("Other", n=(int, ...))
    fields: dict[str, Any] = {
        "when": (dt.datetime | None, None),
        "tags": (list[str], ...),
        "kind": (_Kind, ...),
        "nested": (inner, ...),
        "either": (inner | other | None, None),
        "extra": (dict[str, Any], ...),
    }
    model = create_model("Example", **fields)
    module = ProtocolModule()
    module.add_model("Example", model, "example_table")
    text = module.render("Types.", "models.json")
    assert "class ExampleNested(Record, Protocol):\n    code: str\n" in text
    assert (
        'class Example(Record, Protocol):\n    """example_table"""\n\n'
        "    when: dt.datetime | None\n    tags: list[str]\n    kind: EnumText\n"
        "    nested: ExampleNested\n    either: Record | None\n    extra: dict[str, Any]\n"
    ) in text
    assert "import datetime as dt\nfrom typing import Any, Protocol\n" in text


@pytest.mark.parametrize(
    ("annotation", "message"),
    [(_Plain, "not str-valued"), (set[str], "no static type")],
    ids=["enum-not-str", "set"],
)
def test_a_field_without_a_static_type_is_refused(annotation: Any, message: str) -> None:
    model: type[BaseModel] = create_model("Bad", field=(annotation, ...))
    with pytest.raises(TypeError, match=message):
        ProtocolModule().add_model("Bad", model, None)
