"""YAML read with the place of everything in it, for files whose load errors name a line: policy packs
(:mod:`guard.policy_yaml`) and the proxy's config (:mod:`proxy.config`).

:func:`compose_located` parses text with PyYAML's safe loader and records each key's line and where each
block scalar's content starts (a ``sql: |`` block's line is then the first line of its SQL). It refuses
what a plain ``yaml.safe_load`` would let through silently, a key given twice in one mapping (the
last one would win), and raises :class:`YamlSyntaxError` or :class:`DuplicateKeyError`; each caller
turns them into its own error, worded for its file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "Located", "YamlPath", "YamlSyntaxError", "compose_located"]

YamlPath = tuple[Any, ...]
"""A path into the data: mapping keys and sequence indices, ``("checks", 2, "sql")``."""


@dataclass
class Located:
    """Where things are in the YAML text: each key's line, and where block scalars' content starts."""

    lines: dict[YamlPath, int] = field(default_factory=dict)
    """Path -> 1-based line of its key (of the node itself for the root and sequence items)."""
    blocks: dict[YamlPath, int] = field(default_factory=dict)
    """Path of a literal/folded block scalar (``sql: |``) -> line of its first content line."""


class YamlSyntaxError(ValueError):
    """The text is not YAML; ``line`` (1-based) is where the parser stopped, when it says."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(f"line {line}: invalid YAML: {problem}")
        self.problem = problem
        self.line = line


class DuplicateKeyError(ValueError):
    """A mapping gives the key at ``path`` twice; ``line`` is the second one's; ``root`` is the
    composed document, for callers that name the enclosing item."""

    def __init__(self, path: YamlPath, line: int, root: yaml.Node) -> None:
        super().__init__(f"line {line}: duplicate key {'.'.join(str(p) for p in path)!r}")
        self.path = path
        self.line = line
        self.root = root


def compose_located(text: str) -> tuple[Any, Located]:
    """The data of ``text`` (``yaml.safe_load``) and where each part of it is."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise YamlSyntaxError(getattr(exc, "problem", None) or str(exc), line) from exc
    located = Located()
    if node is None:
        return data, located
    root: yaml.Node = node

    def walk(n: yaml.Node, at: YamlPath) -> None:
        located.lines.setdefault(at, n.start_mark.line + 1)  # a key's own line wins over its value's
        if isinstance(n, yaml.MappingNode):
            seen: set[Any] = set()
            for k, v in n.value:
                key = k.value
                if key in seen:
                    raise DuplicateKeyError((*at, key), k.start_mark.line + 1, root)
                seen.add(key)
                located.lines[(*at, key)] = k.start_mark.line + 1
                walk(v, (*at, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, (*at, i))
        elif isinstance(n, yaml.ScalarNode) and n.style in ("|", ">"):
            located.blocks[at] = n.start_mark.line + 2

    walk(root, ())
    return data, located
