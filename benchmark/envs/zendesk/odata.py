"""``zendesk_get_items`` query options: ``$filter`` through odata-query's parser, ``$orderby``, paging.

The reference parses ``$filter`` with odata-query's lexer/parser and walks the AST itself, over the
row model instances (not their JSON). What that walk does decides the results, so it is kept:

* a comparison reads a field with ``getattr`` (missing field -> ``None``, enum -> its value);
  ``String``/``Boolean`` literals keep their text (so ``verified eq true`` never matches ``True``),
  ``Integer``/``Float`` become numbers, any other node (``null``, lists, functions) stays an AST node;
* a comparator whose class name the variant does not list, any other node type, and ``in``, ``not``
  or function calls evaluate to True (keep the row);
* any error while parsing *or* evaluating (e.g. ``None > 'x'``) is reported as a parse failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from odata_query import ast
from odata_query.grammar import ODataLexer, ODataParser

from benchmark.envs.errors import ToolError
from benchmark.envs.records import Record
from benchmark.envs.zendesk.variant import Comparator

DEFAULT_TOP = 512
MAX_TOP = 1000


def parse_filter(text: str) -> Any:
    return ODataParser().parse(ODataLexer().tokenize(text))


def _operand(node: Any, row: Record) -> Any:
    if isinstance(node, ast.Identifier):
        value: Any = getattr(row, node.name, None)
        return value.value if hasattr(value, "value") else value
    if isinstance(node, ast.String | ast.Boolean):
        return node.val
    if isinstance(node, ast.Integer):
        return int(node.val)
    if isinstance(node, ast.Float):
        return float(node.val)
    return node


def matches(node: Any, row: Record, comparators: Mapping[str, Comparator]) -> bool:
    if isinstance(node, ast.Compare):
        compare = comparators.get(type(node.comparator).__name__)
        if compare is None:
            return True
        return bool(compare(_operand(node.left, row), _operand(node.right, row)))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return matches(node.left, row, comparators) and matches(node.right, row, comparators)
        if isinstance(node.op, ast.Or):
            return matches(node.left, row, comparators) or matches(node.right, row, comparators)
    return True


def apply_filter(rows: Sequence[Record], text: str, comparators: Mapping[str, Comparator]) -> list[Record]:
    try:
        tree = parse_filter(text)
        return [row for row in rows if matches(tree, row, comparators)]
    except Exception as exc:  # the reference reports every parse or evaluation error this way
        raise ToolError(f"Failed to parse OData filter: {exc}") from exc


def apply_orderby(rows: list[Record], text: str) -> list[Record]:
    """Sort by the first word's field; ``desc`` only as the exact second word. Unsortable -> unchanged."""
    parts = text.split()
    if not parts:
        return rows
    name = parts[0]
    descending = len(parts) > 1 and parts[1].lower() == "desc"
    try:
        return sorted(rows, key=lambda row: getattr(row, name, ""), reverse=descending)
    except TypeError:
        return rows


def page(rows: list[Record], skip: int | None, top: int | None) -> list[Record]:
    start = skip or 0
    return rows[start : start + min(top or DEFAULT_TOP, MAX_TOP)]


def select(items: list[dict[str, Any]], text: str | None) -> list[dict[str, Any]]:
    """Keep the listed fields, in the row's own field order."""
    if not text:
        return items
    wanted = {name.strip() for name in text.split(",")}
    return [{k: v for k, v in item.items() if k in wanted} for item in items]
