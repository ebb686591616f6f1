"""A minimal renderer for the subset of Go templates (and Helm functions) the chart uses.

No helm binary exists where the tests run, so the chart is rendered here. Supported: ``{{ }}`` with
``{{-``/``-}}`` trimming, ``{{/* comments */}}``, ``define``/``include``, ``if``/``else if``/``else``,
``with``/``else``, pipelines (``a | f b``), field chains (``.Values.x.y``, ``.``), string and number
literals, parentheses, and the functions ``include toYaml toJson nindent indent quote eq ne not and or
default``. Anything else is an error, not a silent blank: a template that uses more of Go's syntax needs
this renderer extended (docs/deploy.md says what is not checked). A missing value renders as an error
too (Helm would print an empty string), so a misspelt ``.Values`` path fails the tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+)|(?P<op>[|()])|(?P<word>[^\s|()]+))')


class TemplateError(ValueError):
    pass


@dataclass
class _Node:
    kind: str  # text, expr, if, with, define
    text: str = ""
    branches: list[tuple[str | None, list[_Node]]] = field(default_factory=list)
    """if/with: (condition or None for else, body) in order."""


def _lex(source: str) -> list[tuple[str, str]]:
    """('text', str) and ('action', str) items, whitespace trimmed as ``{{-``/``-}}`` ask."""
    items: list[tuple[str, str]] = []
    pos = 0
    trim_next = False
    for m in _ACTION.finditer(source):
        text = source[pos : m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        items.append(("text", text))
        body = m.group(2).strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            items.append(("action", body))
        trim_next = bool(m.group(3))
        pos = m.end()
    tail = source[pos:]
    items.append(("text", tail.lstrip() if trim_next else tail))
    return items


def _parse(items: list[tuple[str, str]], pos: int, stop: tuple[str, ...]) -> tuple[list[_Node], int, str]:
    nodes: list[_Node] = []
    while pos < len(items):
        kind, body = items[pos]
        pos += 1
        if kind == "text":
            if body:
                nodes.append(_Node("text", body))
            continue
        word = body.split(None, 1)[0] if body else ""
        if word in stop or body.startswith("else"):
            if body.startswith("else") and "else" not in stop:
                raise TemplateError(f"unexpected {{{{ {body} }}}}")
            return nodes, pos, body
        if word in ("if", "with"):
            node = _Node(word)
            condition: str | None = body[len(word) :].strip()
            while True:
                inner, pos, ended = _parse(items, pos, ("end", "else"))
                node.branches.append((condition, inner))
                if ended == "end":
                    break
                rest = ended[len("else") :].strip()
                if rest.startswith("if "):
                    condition = rest[3:].strip()
                elif rest:
                    raise TemplateError(f"unsupported {{{{ {ended} }}}}")
                else:
                    condition = None
            nodes.append(node)
        elif word == "define":
            name = json.loads(body[len("define") :].strip())
            inner, pos, _ = _parse(items, pos, ("end",))
            nodes.append(_Node("define", name, [(None, inner)]))
        elif word in ("range", "template", "block", "end"):
            raise TemplateError(f"{{{{ {body} }}}}: not supported by this renderer")
        else:
            nodes.append(_Node("expr", body))
    if stop:
        raise TemplateError(f"missing {{{{ end }}}} (wanted one of {stop})")
    return nodes, pos, ""


def _tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            if expr[pos:].strip():
                raise TemplateError(f"cannot read {expr!r} at {pos}")
            break
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, list | dict) and not value)


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n").removesuffix("\n...")


def _indent(n: int, text: str) -> str:
    return "\n".join(" " * n + line for line in str(text).split("\n"))


def _quote(value: Any) -> str:
    return json.dumps(_string(value))


def _string(value: Any) -> str:
    if value is None:
        raise TemplateError("a missing value is printed")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Renderer:
    """Renders the templates of one chart with one set of values."""

    def __init__(self, templates: Mapping[str, str], context: Mapping[str, Any]) -> None:
        self.context = context
        self.defines: dict[str, list[_Node]] = {}
        self.trees: dict[str, list[_Node]] = {}
        for name, source in templates.items():
            nodes, _, _ = _parse(_lex(source), 0, ())
            for node in nodes:
                if node.kind == "define":
                    self.defines[node.text] = node.branches[0][1]
            self.trees[name] = [n for n in nodes if n.kind != "define"]
        self.functions: dict[str, Callable[..., Any]] = {
            "include": lambda name, dot: self._run(self._define(name), dot),
            "toYaml": _to_yaml,
            "toJson": lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True),
            "nindent": lambda n, text: "\n" + _indent(n, text),
            "indent": _indent,
            "quote": _quote,
            "eq": lambda a, b: a == b,
            "ne": lambda a, b: a != b,
            "not": lambda a: not _truthy(a),
            "and": lambda *a: next((x for x in a if not _truthy(x)), a[-1]),
            "or": lambda *a: next((x for x in a if _truthy(x)), a[-1]),
            "default": lambda d, v=None: v if _truthy(v) else d,
        }

    def render(self, name: str) -> str:
        return self._run(self.trees[name], self.context)

    def _define(self, name: str) -> list[_Node]:
        if name not in self.defines:
            raise TemplateError(f"include {name!r}: no such define")
        return self.defines[name]

    def _run(self, nodes: list[_Node], dot: Any) -> str:
        out: list[str] = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
            elif node.kind == "expr":
                out.append(_string(self._eval(node.text, dot)))
            else:
                for condition, body in node.branches:
                    value = True if condition is None else self._eval(condition, dot)
                    if _truthy(value):
                        inner = value if node.kind == "with" and condition is not None else dot
                        out.append(self._run(body, inner))
                        break
        return "".join(out)

    def _eval(self, expr: str, dot: Any) -> Any:
        tokens = _tokens(expr)
        value, rest = self._pipeline(tokens, dot)
        if rest:
            raise TemplateError(f"{expr!r}: unexpected {rest[0][1]!r}")
        return value

    def _pipeline(self, tokens: list[tuple[str, str]], dot: Any) -> tuple[Any, list[tuple[str, str]]]:
        value, tokens = self._command(tokens, dot, ())
        while tokens and tokens[0] == ("op", "|"):
            value, tokens = self._command(tokens[1:], dot, (value,))
        return value, tokens

    def _command(
        self, tokens: list[tuple[str, str]], dot: Any, piped: tuple[Any, ...]
    ) -> tuple[Any, list[tuple[str, str]]]:
        terms: list[Any] = []
        name: str | None = None
        while tokens and tokens[0] not in (("op", "|"), ("op", ")")):
            kind, text = tokens[0]
            tokens = tokens[1:]
            if kind == "word" and not text.startswith((".", "$")) and not terms and name is None:
                if text not in self.functions:
                    raise TemplateError(f"unknown function {text!r}")
                name = text
                continue
            if (kind, text) == ("op", "("):
                value, tokens = self._pipeline(tokens, dot)
                if not tokens or tokens[0] != ("op", ")"):
                    raise TemplateError("unbalanced parentheses")
                tokens = tokens[1:]
                terms.append(value)
            else:
                terms.append(self._operand(kind, text, dot))
        args = [*terms, *piped]
        if name is None:
            if len(args) != 1:
                raise TemplateError(f"{len(args)} values where one was expected")
            return args[0], tokens
        return self.functions[name](*args), tokens

    def _operand(self, kind: str, text: str, dot: Any) -> Any:
        if kind == "str":
            return json.loads(text)
        if kind == "num":
            return int(text)
        if text == ".":
            return dot
        if text.startswith("."):
            value = dot
            parts = text[1:].split(".")
            for i, part in enumerate(parts):
                if not isinstance(value, Mapping):
                    raise TemplateError(f"{text}: {'.'.join(parts[:i]) or '.'} is not a map")
                value = value.get(part)
            return value
        raise TemplateError(f"unsupported operand {text!r}")
