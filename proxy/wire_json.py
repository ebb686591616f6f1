"""JSON on the lean paths (proxy/relay_lean.py, proxy/lean_upstream.py), read and written by pydantic-core.

The SDK reads an upstream's answer with pydantic-core's parser (``validate_json``) and the lean
paths read and write a few JSON bodies per call. pydantic-core's ``from_json`` and ``to_json`` do the
same in about a third of the standard library's time and without its Python-level wrappers (issue
18's instruction counts: JSON was about 3 % of a passthrough read). They agree with ``json`` on
every document both accept, big integers, ``NaN``/``Infinity`` and integer keys included. Where they
do not accept it, the standard library decides, so nothing is answered differently than before:

* :func:`loads`: a document pydantic-core refuses (a lone surrogate escape, nesting deeper than its
  limit, malformed JSON) is read by ``json.loads``, which parses it or raises its own ``ValueError``
  (or ``RecursionError``) exactly as before.
* :func:`dumps`: a value pydantic-core cannot write (a string holding a lone surrogate, a type JSON
  has no form for) is written by ``json.dumps`` (compact separators), which writes it or raises.

The written bytes are compact UTF-8 and the same JSON value, spelled differently in two ways:
non-ASCII text is not ``\\u``-escaped, and a float is written in its shortest round-trip form, which is
not always Python's (``1e-05`` as ``0.00001``; the same double either way).
tests/proxy/test_wire_json.py holds both functions to the standard library's values.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core


def loads(data: bytes | str) -> Any:
    """The JSON value of ``data`` (see the module docstring for who reads it)."""
    try:
        return pydantic_core.from_json(data)
    except ValueError:
        return json.loads(data)


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (see the module docstring for who writes it)."""
    try:
        return pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError:
        return json.dumps(value, separators=(",", ":")).encode()


__all__ = ["dumps", "loads"]
