"""Policy packs written for the loader tests: a small shop schema and its tools, a pack written from
text, and the error a bad pack must raise (naming its file, rule and line). Bundle-free."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from guard.policy import PolicyError, load_policy

__all__ = ["ARGUMENTS", "EXAMPLE_PACK", "SCHEMA", "pack_error", "write_pack"]

EXAMPLE_PACK = Path(__file__).resolve().parents[2] / "policies" / "example" / "policy.yaml"

SCHEMA = {"orders": ["id", "status", "customer_id", "total"], "refunds": ["id", "order_id", "amount"]}
ARGUMENTS = {
    "get_order": {"order_id"},
    "cancel_order": {"order_id", "reason"},
    "create_refund": {"order_id", "amount"},
    "void_refund": {"refund_id"},
}


def write_pack(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    """``text`` (dedented) as the file ``name`` in ``tmp_path``."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def pack_error(path: Path, **kwargs: Any) -> PolicyError:
    """The :class:`PolicyError` loading ``path`` against the shop raises, checked to name its file and
    line (and its rule, when it has one) at the start of the message."""
    options: dict[str, Any] = {"schema": SCHEMA, "tools": list(ARGUMENTS), "tool_arguments": ARGUMENTS}
    options.update(kwargs)
    with pytest.raises(PolicyError) as info:
        load_policy(path, **options)
    error = info.value
    assert error.file == str(path)
    assert str(error).startswith(f"{path}: line {error.line}: "), str(error)
    if error.rule is not None:
        assert f"rule {error.rule}: " in str(error)
    return error
