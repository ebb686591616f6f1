"""A compiled validity check (jsonschema-rs) that may say "valid" only where python-jsonschema agrees.

Validating with python-``jsonschema`` walks the schema in Python on every call (``iter_errors``, a
type check per keyword, ``descend``/``evolve`` per subschema): several per cent of a proxied read's
CPU. A schema compiled by ``jsonschema-rs`` answers "valid or not" in a few microseconds, but its
*messages* differ, and the guard's hints and the SDK's errors are built from python-``jsonschema``'s.
So :class:`FastValidity` is only a fast path in front of the python pass: when it says valid, the
python pass is skipped (it would find nothing); when it says invalid (or cannot read the instance),
the python pass runs unchanged and produces every message, code and hint as before.

That is sound only if "valid here" implies "valid there". :func:`compile_validity` decides once per
schema, and returns :class:`Declined` (with the reason) for a schema where the two may disagree:

* ``pattern`` / ``patternProperties``: Rust's regex dialect is not Python's ``re`` (``$`` before a
  final newline, ``\\d`` and ``\\w`` on non-ASCII digits and letters, lookaround, ...);
* ``multipleOf``: python-``jsonschema`` divides floats, jsonschema-rs does not always;
* a ``$ref`` that is not a local JSON pointer (``#...``), ``$dynamicRef``/``$recursiveRef``, and
  ``$id``/``$anchor``/``$vocabulary`` or a nested ``$schema`` (base URIs, anchors and vocabularies
  are resolved by two different libraries);
* ``unevaluatedProperties`` / ``unevaluatedItems`` (they depend on what every other keyword, known
  or not to the draft, marked as evaluated);
* a draft other than 2020-12, 2019-09 and 7.

Keywords python-``jsonschema`` does not implement for the draft (annotations, ``x-...`` extensions)
are harmless: the python pass ignores them, so jsonschema-rs can only be stricter there. ``format``
is an annotation on both sides (no format checker; ``validate_formats=False``); remote references are
never fetched (``offline=True``).

**Lax mode** (guard.validation) accepts numeric strings for numbers and integers and boolean-like
strings and 0/1 for booleans. The fast check is strict JSON Schema; strictly valid implies lax-valid
where more accepting types can only make a schema accept more: ``not``, ``oneOf``, ``if`` and
``contains`` (a count) are declined. A numeric bound (``minimum`` and the like) is declined where a
valid instance may bring a string to it: lax mode bounds a numeric string as its number, where the
strict fast check leaves a bound on a string unjudged (``{"minimum": 0}`` and ``"-1"``). It is kept
where the schema declares a non-string ``type`` or, in an ``anyOf`` branch, where every branch does
(a pydantic ``Optional[int]`` with bounds).

Instances are JSON values as decoded from the wire (``dict``, ``list``, ``str``, ``int``, ``float``,
``bool``, ``None``); jsonschema-rs reads a ``tuple`` as an array, python-``jsonschema`` does not.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import jsonschema_rs
from jsonschema import Draft7Validator, Draft201909Validator, Draft202012Validator
from jsonschema.protocols import Validator

_RUST_CLASSES: dict[str, type[jsonschema_rs.Validator]] = {
    Draft202012Validator.META_SCHEMA["$id"]: jsonschema_rs.Draft202012Validator,
    Draft201909Validator.META_SCHEMA["$id"]: jsonschema_rs.Draft201909Validator,
    Draft7Validator.META_SCHEMA["$id"]: jsonschema_rs.Draft7Validator,
}
_DECLINED_KEYWORDS = {
    "pattern": "regex dialects differ (Python re, Rust regex)",
    "patternProperties": "regex dialects differ (Python re, Rust regex)",
    "multipleOf": "float division differs",
    "$dynamicRef": "dynamic references are resolved by two libraries",
    "$recursiveRef": "dynamic references are resolved by two libraries",
    "unevaluatedProperties": "depends on what every other keyword evaluated",
    "unevaluatedItems": "depends on what every other keyword evaluated",
}
_RESOLUTION_KEYWORDS = ("$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary")
_LAX_DECLINED = frozenset({"not", "oneOf", "if", "contains"})
"""Keywords under which accepting more (lax types) can reject more."""
_NUMERIC_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_CONJUNCTIVE = ("additionalProperties", "propertyNames", "items", "additionalItems")
"""Schema-valued keywords every part of a valid instance they apply to is valid for."""
_SPECULATIVE = ("contains", "not", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems")
"""Schema-valued keywords a valid instance (or its parts) may fail."""
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "dependencies")
_SAME_INSTANCE = frozenset({"dependentSchemas", "dependencies"})


@dataclass(frozen=True)
class Declined:
    """The schema gets no fast path; ``reason`` says which keyword (or draft) and why."""

    reason: str


class FastValidity:
    """One schema compiled by jsonschema-rs: :meth:`valid` is True only for an instance the python
    pass would also accept (see the module docstring for the schemas this holds for)."""

    def __init__(self, compiled: jsonschema_rs.Validator) -> None:
        self._compiled = compiled

    def valid(self, instance: Any) -> bool:
        """True: valid, the python pass may be skipped. False: invalid or not a JSON value the
        compiled schema can read; the python pass decides."""
        try:
            return self._compiled.is_valid(instance)
        except (ValueError, TypeError, OverflowError):
            return False


def compile_validity(
    schema: Mapping[str, Any], draft: type[Validator], *, lax: bool = False
) -> FastValidity | Declined:
    """The fast check of ``schema`` as the python pass reads it with ``draft`` (the class
    ``validator_for`` chose; its metaschema check is the caller's), strict or ``lax``."""
    metaschema = str(draft.META_SCHEMA.get("$id", draft.META_SCHEMA.get("id")))
    rust_class = _RUST_CLASSES.get(metaschema)
    if rust_class is None:
        return Declined(f"$schema {metaschema}: not a draft the fast path is tested against")
    reason = _Walk(schema, frozenset(draft.VALIDATORS), lax).reason()
    if reason is not None:
        return Declined(reason)
    try:
        compiled = rust_class(dict(schema), validate_formats=False, offline=True)
    except (ValueError, TypeError) as exc:
        return Declined(f"jsonschema-rs cannot compile it: {str(exc).splitlines()[0]}")
    return FastValidity(compiled)


class _Reach(enum.Enum):
    """What an instance reaching a subschema may be when the whole instance is strictly valid."""

    VALID = "valid for this subschema"
    NOT_A_STRING = "perhaps invalid here, but not a string"
    ANY = "anything"


class _Walk:
    """Finds the first keyword that declines the fast path, following local ``$ref``s."""

    def __init__(self, root: Mapping[str, Any], known: frozenset[str], lax: bool) -> None:
        self.root = root
        self.known = known
        self.lax = lax
        self.seen: set[tuple[int, _Reach]] = set()

    def reason(self) -> str | None:
        return self.visit(self.root, _Reach.VALID, "#")

    def visit(self, node: Any, reach: _Reach, where: str) -> str | None:
        if not isinstance(node, Mapping) or (id(node), reach) in self.seen:
            return None  # a boolean schema, or a subschema already walked this way
        self.seen.add((id(node), reach))
        reason = self.own_keywords(node, reach)
        if reason is not None:
            return f"{reason} (at {where})"
        for child, child_reach, path in self.children(node, reach):
            reason = self.visit(child, child_reach, f"{where}/{path}")
            if reason is not None:
                return reason
        return None

    def own_keywords(self, node: Mapping[str, Any], reach: _Reach) -> str | None:
        for keyword in node:
            if keyword in _RESOLUTION_KEYWORDS or (keyword == "$schema" and node is not self.root):
                return f"{keyword}: base URIs, anchors and vocabularies are resolved by two libraries"
            if keyword not in self.known:
                continue  # the python pass ignores it: jsonschema-rs can only be stricter
            if keyword in _DECLINED_KEYWORDS:
                return f"{keyword}: {_DECLINED_KEYWORDS[keyword]}"
            if keyword == "$ref" and _resolve(self.root, str(node[keyword])) is None:
                return "$ref: not a reference to a subschema of this schema"
            if self.lax and keyword in _LAX_DECLINED:
                return f"{keyword}: lax types accepting more can make it reject more"
            if self.lax and keyword in _NUMERIC_BOUNDS and not _not_a_string(node, reach):
                return f"{keyword}: in lax mode a string may reach it"
        return None

    def children(self, node: Mapping[str, Any], reach: _Reach) -> Iterator[tuple[Any, _Reach, str]]:
        below = _Reach.VALID if reach is _Reach.VALID else _Reach.ANY
        for keyword in (*_CONJUNCTIVE, *_SPECULATIVE):
            if isinstance(node.get(keyword), Mapping):
                yield node[keyword], below if keyword in _CONJUNCTIVE else _Reach.ANY, keyword
        for keyword in _SCHEMA_MAPS:
            value = node.get(keyword)
            if isinstance(value, Mapping):
                child_reach = reach if keyword in _SAME_INSTANCE else below
                yield from ((v, child_reach, f"{keyword}/{k}") for k, v in value.items())
        branch = _Reach.NOT_A_STRING if _not_a_string(node, reach) else _Reach.ANY
        lists = {"allOf": reach, "anyOf": branch, "oneOf": _Reach.ANY, "prefixItems": below, "items": below}
        for keyword, child_reach in lists.items():
            value = node.get(keyword)
            if isinstance(value, list):
                yield from ((v, child_reach, f"{keyword}/{i}") for i, v in enumerate(value))
        if isinstance(node.get("$ref"), str):
            yield _resolve(self.root, node["$ref"]), reach, "$ref"


def _not_a_string(node: Mapping[str, Any], reach: _Reach) -> bool:
    """An instance reaching ``node`` this way is never a string: said so from above, or the instance
    is valid here and ``node`` (one ``allOf`` member, or every ``anyOf`` branch) admits no string."""
    if reach is not _Reach.VALID:
        return reach is _Reach.NOT_A_STRING
    branches, members = node.get("anyOf"), node.get("allOf")
    return (
        _excludes_strings(node)
        or (isinstance(branches, list) and all(_excludes_strings(b) for b in branches))
        or (isinstance(members, list) and any(_excludes_strings(m) for m in members))
    )


def _excludes_strings(schema: Any) -> bool:
    """The schema's ``type`` (or ``enum``/``const``) admits no string (said of no schema with a
    ``$ref``: up to draft 7 its siblings are ignored)."""
    if schema is False:
        return True
    if not isinstance(schema, Mapping) or "$ref" in schema:
        return False
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind != "string"
    if isinstance(kind, list):
        return "string" not in kind
    if isinstance(schema.get("enum"), list):
        return not any(isinstance(v, str) for v in schema["enum"])
    return "const" in schema and not isinstance(schema["const"], str)


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    """The subschema a local ``#/json/pointer`` names (percent- and ``~``-escapes decoded), else
    None (a reference elsewhere, or to nothing)."""
    if not ref.startswith("#"):
        return None
    pointer = unquote(ref[1:])
    node: Any = root
    if not pointer:
        return node
    if not pointer.startswith("/"):
        return None
    for part in pointer[1:].split("/"):
        token = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
