"""Loading a policy pack: broken Python checks, unreadable or misplaced files are refused naming the
file; a valid pack loads with every section. Bundle-free: the packs are written for a small shop
schema (tests/support/packs.py) or the demo app.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import pytest

from guard.checks import PythonCheck
from guard.models import EffectClass
from guard.policy import PolicyError, load_policy
from tests.support.packs import ARGUMENTS, EXAMPLE_PACK, SCHEMA, pack_error, write_pack

PYTHON_PACK = """
    name: python
    module: rules.py
    checks:
      - id: fine
        phase: at_commit
        message: m
        source: {ref: s}
        python: ok
      - id: absent
        phase: at_commit
        message: m
        source: {ref: s}
        python: {function}
    """


@pytest.mark.parametrize(
    ("function", "fragment"),
    [
        ("missing", "function 'missing' not found"),
        ("two", "'two' must take one argument"),
        ("NOT_CALLABLE", "'NOT_CALLABLE' is not a function"),
        ("no_such_module_xyz:check", "module 'no_such_module_xyz' not found"),
    ],
)
def test_python_function_missing_or_unusable(tmp_path: Path, function: str, fragment: str) -> None:
    (tmp_path / "rules.py").write_text(
        "def ok(ctx):\n    return []\n\ndef two(ctx, extra):\n    return []\n\nNOT_CALLABLE = 3\n",
        encoding="utf-8",
    )
    error = pack_error(write_pack(tmp_path, PYTHON_PACK.replace("{function}", function)))
    assert (error.rule, error.line) == ("absent", 13), str(error)
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("module", "fragments"),
    [("absent.py", ("module file", "absent.py")), ("broken.py", ("RuntimeError: boom at import",))],
)
def test_python_module_missing_or_broken(tmp_path: Path, module: str, fragments: tuple[str, ...]) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom at import')\n", encoding="utf-8")
    pack = """
        name: python
        description: a pack whose module is missing or broken
        module: {module}
        checks:
          - id: c
            phase: at_commit
            message: m
            source: {ref: s}
            python: f
        """
    error = pack_error(write_pack(tmp_path, pack.replace("{module}", module)))
    assert error.line == 3
    assert all(fragment in str(error) for fragment in fragments), str(error)


PACKAGE_PACK = """
    name: package
    module: checks/__init__.py
    checks:
      - id: c
        phase: at_commit
        message: m
        source: {ref: s}
        python: found
    """


def _package(folder: Path, found: str) -> None:
    """``checks/``: the check in ``rules.py``, re-exported by ``__init__.py`` with a relative import."""
    folder.mkdir(exist_ok=True)
    (folder / "__init__.py").write_text("from .rules import found\n\n__all__ = ['found']\n", encoding="utf-8")
    (folder / "rules.py").write_text(f"def found(ctx):\n    return {found}\n", encoding="utf-8")


def _run_found(path: Path) -> object:
    check = load_policy(path).checks[0]
    assert isinstance(check, PythonCheck)
    return check.function(cast(Any, None))


def test_python_module_may_be_a_package_run_afresh_on_each_load(tmp_path: Path) -> None:
    """A package's ``__init__.py`` loads with its relative imports; loading it again runs the package's
    modules as they are now (as a single file is), and a broken one leaves none of them behind."""
    path = write_pack(tmp_path, PACKAGE_PACK)
    _package(tmp_path / "checks", "['first']")
    assert _run_found(path) == ["first"]
    _package(tmp_path / "checks", "['second']")
    assert _run_found(path) == ["second"]
    (tmp_path / "checks" / "rules.py").write_text("raise RuntimeError('boom in rules')\n", encoding="utf-8")
    error = pack_error(path)
    assert error.line == 2 and "RuntimeError: boom in rules" in str(error), str(error)
    assert not [m for m in sys.modules if m.startswith("shadowguard_policy_") and m.endswith(".rules")]


def test_unreadable_file_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(PolicyError, match="cannot read") as info:
        load_policy(missing)
    assert info.value.file == str(missing)


def test_pack_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    error = pack_error(write_pack(tmp_path, "- just\n- a list\n"))
    assert error.line == 1 and "a policy pack is a YAML mapping" in str(error)


def test_pack_folder_loads_its_policy_yaml() -> None:
    assert load_policy(EXAMPLE_PACK.parent).name == load_policy(EXAMPLE_PACK).name == "example"


def test_pack_for_another_domain_is_refused(tmp_path: Path) -> None:
    path = write_pack(
        tmp_path,
        """
        name: wrong-domain
        description: d
        domain: external_booking_v1
        """,
    )
    error = pack_error(path, domain="sandbox_external_retail")
    assert error.line == 3
    assert "for domain 'external_booking_v1', not 'sandbox_external_retail'" in str(error)


# -- valid packs ------------------------------------------------------------------------------------
def test_example_pack_loads_alone_and_against_the_demo_app() -> None:
    """The quickstart's pack is written for the demo accounts app (proxy/demo/server.py)."""
    from proxy.demo.server import TOOLS, metadata

    alone = load_policy(EXAMPLE_PACK)
    assert alone.name == "example" and alone.model.domain is None
    checked = load_policy(
        EXAMPLE_PACK,
        schema={name: [c.name for c in table.columns] for name, table in metadata.tables.items()},
        tools=[t.name for t in TOOLS],
        tool_arguments={t.name: set(t.input_schema.get("properties", {})) for t in TOOLS},
    )
    assert [c.id for c in checked.checks] == [
        "example.frozen_accounts",
        "example.no_overdraft",
        "example.accounts_named",
    ]
    assert checked.effect_of("transfer_funds") is EffectClass.IRREVERSIBLE
    assert not checked.allows("close_account")
    rule = checked.approval_for("transfer_funds", EffectClass.IRREVERSIBLE, {"amount": 1500})
    assert rule is not None and rule.id == "example.large_transfers"
    assert checked.approval_for("transfer_funds", EffectClass.IRREVERSIBLE, {"amount": 80}) is None
    retry = checked.retry_for("list_accounts")
    assert retry is not None and (retry.max_attempts, retry.idempotent) == (3, True)
    assert checked.retry_for("rename_account") is None


def test_a_pack_with_every_section_loads(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text("def nothing(ctx):\n    return []\n", encoding="utf-8")
    path = write_pack(
        tmp_path,
        """
        version: 1
        name: full
        domain: shop
        description: every key once
        module: rules.py
        tools:
          allow: [get_order, cancel_order, create_refund, void_refund]
          effects: {get_order: read, cancel_order: irreversible, create_refund: write}
          compensations:
            create_refund:
              tool: void_refund
              arguments: {refund_id: order_id}
        checks:
          - id: open-orders-only
            phase: before_call
            tools: [cancel_order]
            source: {ref: "Shop policy §1", quote: "Only open orders can be cancelled."}
            message: Only open orders can be cancelled.
            hint: Check the order status first.
            sql: SELECT o.id FROM orders AS o WHERE o.id = :order_id AND o.status <> 'open'
          - id: python-after
            phase: after_call
            tools: [create_refund]
            source: {ref: "Shop policy §2"}
            message: m
            python: nothing
          - id: refunds-cover
            phase: at_commit
            source: {ref: "Shop policy §3"}
            message: m
            sql: SELECT r.order_id FROM refunds AS r GROUP BY r.order_id HAVING SUM(r.amount) < 0
        approvals:
          - id: big
            tools: [create_refund]
            argument: amount
            above: 100
            source: {ref: "Shop policy §4"}
          - id: all-irreversible
            effect: irreversible
            source: {ref: "Shop policy §5"}
        retry:
          - {tool: get_order, max_attempts: 3, idempotent: true}
        """,
    )
    pack = load_policy(path, schema=SCHEMA, tools=list(ARGUMENTS), tool_arguments=ARGUMENTS, domain="shop")
    assert [(c.id, c.phase) for c in pack.checks] == [
        ("open-orders-only", "before_call"),
        ("python-after", "after_call"),
        ("refunds-cover", "at_commit"),
    ]
    compensation = pack.compensation_for("create_refund")
    assert compensation is not None and compensation.tool == "void_refund"
    assert compensation.arguments == {"refund_id": "order_id"}
    big = pack.approval_for("create_refund", EffectClass.WRITE, {"amount": 150})
    assert big is not None and big.id == "big"
    held = pack.approval_for("cancel_order", EffectClass.IRREVERSIBLE, {"order_id": "o1"})
    assert held is not None and held.id == "all-irreversible"
    assert pack.approval_for("create_refund", EffectClass.WRITE, {"amount": True}) is None
