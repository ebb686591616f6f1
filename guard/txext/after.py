"""Queries after a request (feature ``after``, docs/transaction-extension.md, docs/adr/015), both ends.

A ``tools/call`` or ``changes`` request may list read-only SELECTs in
``_meta["shadowguard/tx/after"]``; the participant runs them after the request's own work, in the same
access to the session's backend, exactly as ``shadowguard/tx/query`` would, and answers each in the
result's ``_meta["shadowguard/tx"]["after"]`` (in order): ``{"rows": [...]}``, or ``{"error": {"code",
"message"}}`` with the error ``query`` would have answered. A query's failure does not fail the request.

The guard asks for the queries its checks will run next (their parameters depend only on the call's
arguments), so an after-call check costs no ``query`` round trip, and a commit's review none either.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import mcp.types as types
from mcp import MCPError
from pydantic_core import to_jsonable_python

from guard.backend import Backend
from guard.txext.protocol import AFTER_META_KEY, MAX_AFTER, QUERY, TX_FAILED, TX_META_KEY, error
from guard.txext.registry import mapped

Query = tuple[str, dict[str, Any]]
"""A SELECT's text and its ``:name`` parameters."""


def parse_after(value: Any) -> list[Query]:
    """The queries of ``_meta["shadowguard/tx/after"]``; INVALID_PARAMS if malformed."""
    what = f"_meta[{AFTER_META_KEY!r}]"
    if not isinstance(value, list) or len(value) > MAX_AFTER:
        raise error(types.INVALID_PARAMS, f"{what} must be a list of at most {MAX_AFTER} queries")
    queries: list[Query] = []
    for item in value:
        if (
            not isinstance(item, Mapping)
            or not set(item) <= {"sql", "params"}
            or not isinstance(item.get("sql"), str)
            or not item["sql"].strip()
            or not isinstance(item.get("params", {}), Mapping)
        ):
            raise error(
                types.INVALID_PARAMS,
                f'{what}: each query is {{"sql": "SELECT ...", "params": {{name: value}}}} (params optional)',
            )
        queries.append((item["sql"], dict(item.get("params") or {})))
    return queries


def run_after(queries: Sequence[Query], backend: Backend) -> list[dict[str, Any]]:
    """Each query's answer, in order (in the request's worker thread, after its own work)."""
    answers: list[dict[str, Any]] = []
    for sql, params in queries:
        try:
            rows = mapped(QUERY, functools.partial(_query, sql, params), backend)
        except MCPError as exc:
            answers.append({"error": {"code": exc.code, "message": exc.message}})
        else:
            answers.append({"rows": to_jsonable_python(rows)})
    return answers


def _query(sql: str, params: Mapping[str, Any], backend: Backend) -> list[dict[str, Any]]:
    return backend.query(sql, params)


def wire(queries: Sequence[Query]) -> list[dict[str, Any]]:
    """The client's ``_meta["shadowguard/tx/after"]`` for ``queries``."""
    return [{"sql": sql, "params": params} for sql, params in queries]


def asked(sql: str, params: Mapping[str, Any] | None) -> tuple[str, Query] | None:
    """A query as the client asks for it: the key that identifies its answer (its text and its
    parameters as JSON) and the query with its parameters as JSON (None: a parameter has no JSON
    form, so the query is not asked ahead)."""
    try:
        jsonable: dict[str, Any] = to_jsonable_python(dict(params or {}))
    except (ValueError, TypeError):  # PydanticSerializationError is a ValueError
        return None
    return repr((sql, sorted(jsonable.items()))), (sql, jsonable)


def key(sql: str, params: Mapping[str, Any] | None) -> str | None:
    """The key of :func:`asked` alone (None: the query cannot be asked ahead)."""
    prepared = asked(sql, params)
    return prepared[0] if prepared is not None else None


def read_answers(
    meta: Mapping[str, Any] | None, asked: Sequence[tuple[str, Query]]
) -> dict[str, list[dict[str, Any]] | MCPError]:
    """The answers a result's ``_meta`` gives to the queries ``asked`` (key, query), by key; a
    query it does not answer (a malformed or missing entry) is left out (then asked for again)."""
    report = (meta or {}).get(TX_META_KEY)
    answers = report.get("after") if isinstance(report, Mapping) else None
    if not isinstance(answers, list) or len(answers) != len(asked):
        return {}
    out: dict[str, list[dict[str, Any]] | MCPError] = {}
    for (name, _), answer in zip(asked, answers, strict=True):
        if not isinstance(answer, Mapping):
            continue
        failed = answer.get("error")
        if isinstance(failed, Mapping):
            code = failed["code"] if isinstance(failed.get("code"), int) else TX_FAILED
            out[name] = MCPError(code=code, message=str(failed.get("message")))
        elif isinstance(answer.get("rows"), list) and all(isinstance(r, Mapping) for r in answer["rows"]):
            out[name] = [dict(r) for r in answer["rows"]]
    return out
