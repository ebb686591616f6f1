"""A lean result's structured content against the tool's output schema: a compiled check first.

:class:`~proxy.lean_upstream.LeanUpstream` checks a result as the SDK client does
(``ClientSession.validate_tool_result``: python-``jsonschema``, ``best_match``'s message in a
``RuntimeError``). :class:`OutputSchemaCheck` answers first, with :mod:`guard.fast_validity`'s compiled
check of the very schema the SDK session holds for the tool (the session's cache of its own
``tools/list``, ``ClientSession._tool_output_schemas``): when that says valid, the SDK's check would
find nothing and is skipped. In every other case (a tool the session has not listed, which the SDK
lists first; no schema; no structured content; a schema the fast path declines or the SDK finds
invalid; content the compiled check rejects) the SDK's check runs as before, so its errors are its own.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import mcp.types as types
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from guard.fast_validity import Declined, FastValidity, compile_validity

MAX_SCHEMAS = 1024
"""Compiled checks kept per upstream (schemas of listings since replaced are dropped past it)."""


class OutputSchemaCheck:
    """The compiled output-schema check of each schema object an SDK session validates with."""

    def __init__(self) -> None:
        self._by_schema: dict[int, tuple[dict[str, Any], FastValidity | Declined]] = {}
        """By ``id`` of the session's schema dict, which the entry keeps alive (so the id is not reused)."""

    def conforms(self, session: Any, name: str, result: types.CallToolResult) -> bool:
        """True: ``result`` passes the SDK's output-schema check for ``name`` on ``session`` (which
        may then be skipped). False: no fast verdict; the SDK's check decides."""
        schemas = getattr(session, "_tool_output_schemas", None)
        schema = schemas.get(name) if isinstance(schemas, dict) else None
        if not isinstance(schema, dict) or result.structured_content is None:
            return False
        entry = self._by_schema.get(id(schema))
        if entry is None or entry[0] is not schema:
            if len(self._by_schema) >= MAX_SCHEMAS:
                self._by_schema.clear()
            entry = (schema, _compiled(json.dumps(schema, sort_keys=True)))
            self._by_schema[id(schema)] = entry
        check = entry[1]
        return isinstance(check, FastValidity) and check.valid(result.structured_content)


@functools.lru_cache(maxsize=MAX_SCHEMAS)
def _compiled(schema_json: str) -> FastValidity | Declined:
    """The fast check of an output schema as the SDK reads it (``validator_for``'s draft, strict
    types), shared by every upstream; none for a schema the SDK finds invalid (it says so per call)."""
    schema = json.loads(schema_json)
    draft = validator_for(schema)
    try:
        draft.check_schema(schema)
    except SchemaError:
        return Declined("not a valid schema: the SDK's check reports it")
    return compile_validity(schema, draft)
