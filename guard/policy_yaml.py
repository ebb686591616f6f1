"""A policy pack's YAML read with the place of everything in it, so that every load error can name its
file, rule and line.

:class:`PolicyError` is the error of a pack that cannot be loaded. :func:`_read_pack` reads a pack's
file into its mapping; :func:`_compose` parses the text with :mod:`guard.located_yaml` (each key's
line, where block scalars' content starts; duplicate keys refused); :func:`_line` and :func:`_rule_id`
turn a path into the text (``("checks", 2, "sql")``) into its line and rule;
:func:`model_error` names the first validation error of a pack's model
that way. Re-exported by :mod:`guard.policy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from guard.located_yaml import DuplicateKeyError, Located, YamlPath, YamlSyntaxError, compose_located


class PolicyError(ValueError):
    """A policy pack that cannot be loaded; the message names file, rule and line.

    The same facts are attributes (``file``, ``rule``, ``line``; None when not known) so callers can
    point an editor at the spot without parsing the message.
    """

    def __init__(
        self, message: str, *, file: str | None = None, rule: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.file = file
        self.rule = rule
        self.line = line


_Loc = YamlPath


def _read_pack(path: Path) -> tuple[Path, dict[str, Any], Located]:
    """A pack's file (``path``, or ``policy.yaml`` in the folder ``path``), its YAML mapping and the
    places in it."""
    if path.is_dir():
        path = path / "policy.yaml"
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{where}: cannot read: {exc.strerror}", file=where) from exc
    data, located = _compose(text, where)
    if not isinstance(data, dict):
        raise PolicyError(f"{where}: line 1: a policy pack is a YAML mapping", file=where, line=1)
    return path, data, located


def _compose(text: str, where: str) -> tuple[Any, Located]:
    """:func:`guard.located_yaml.compose_located`, its errors as :class:`PolicyError` naming the rule."""
    try:
        return compose_located(text)
    except YamlSyntaxError as exc:
        message = f"{where}: line {exc.line}: invalid YAML: {exc.problem}"
        raise PolicyError(message, file=where, line=exc.line) from exc
    except DuplicateKeyError as exc:
        rule = _rule_of_node(exc.root, exc.path)
        path = ".".join(str(p) for p in exc.path)
        message = f"{where}: line {exc.line}: rule {rule}: duplicate key {path!r}"
        raise PolicyError(message, file=where, rule=rule, line=exc.line) from exc


_RULE_SECTIONS = ("checks", "rules", "approvals")


def _rule_of_node(root: yaml.Node, loc: _Loc) -> str:
    """The rule a YAML path belongs to, from the composed nodes (the data is not loaded yet)."""
    if (
        len(loc) >= 2
        and loc[0] in _RULE_SECTIONS
        and isinstance(loc[1], int)
        and isinstance(root, yaml.MappingNode)
    ):
        section = next((v for k, v in root.value if k.value == loc[0]), None)
        if isinstance(section, yaml.SequenceNode) and loc[1] < len(section.value):
            item = section.value[loc[1]]
            if isinstance(item, yaml.MappingNode):
                found = next((v.value for k, v in item.value if k.value == "id"), None)
                if isinstance(found, str) and found:
                    return found
        return f"{loc[0]}[{loc[1]}]"
    return ".".join(str(p) for p in loc[:2])


def _line(lines: Mapping[_Loc, int], loc: Sequence[Any]) -> int | None:
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def _rule_id(data: Any, loc: Sequence[Any]) -> str:
    if len(loc) >= 2 and loc[0] in _RULE_SECTIONS and isinstance(loc[1], int):
        try:
            rule_id = data[loc[0]][loc[1]].get("id")
        except (IndexError, KeyError, TypeError, AttributeError):
            rule_id = None
        return str(rule_id) if rule_id else f"{loc[0]}[{loc[1]}]"
    return ".".join(str(p) for p in loc[:2]) or "pack"


def model_error(exc: ValidationError, data: Any, lines: Mapping[_Loc, int], where: str) -> PolicyError:
    """The first validation error of a pack's model, naming file, rule and line."""
    errors = exc.errors()
    err = errors[0]
    loc = err["loc"]
    line = _line(lines, loc)
    rule = _rule_id(data, loc)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return PolicyError(
        f"{where}: line {line}: rule {rule}: {'.'.join(map(str, loc))}: {err['msg']}{more}",
        file=where,
        rule=rule,
        line=line,
    )
