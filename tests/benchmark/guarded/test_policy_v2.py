"""Policy pack format v2 (guard.packv2, guard.ruleexpr): each construct, each load error naming file,
rule and line, typed arguments, approval conditions on the shadow state, and the same verdicts on SQLite
and PostgreSQL through a real GuardSession over the retail domain."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, executor_for, load_domain_policy, tool_infos
from guard.models import EffectClass, Verdict
from guard.policy import PolicyError, PolicyPack, load_policy
from guard.ruleexpr import ArgSpec, ArgumentValueError
from guard.session import GuardSession
from proxy.cli import app

ROOT = Path(__file__).resolve().parents[3]
RETAIL_PACK = ROOT / "policies" / "sandbox_external_retail"

SCHEMA = {
    "shop_orders": ["id", "status", "total", "customer_id"],
    "shop_refunds": ["id", "order_id", "amount"],
}
COLUMN_TYPES = {
    "shop_orders": {"id": "TEXT", "status": "TEXT", "total": "DOUBLE", "customer_id": "TEXT"},
    "shop_refunds": {"id": "TEXT", "order_id": "TEXT", "amount": "DOUBLE"},
}


def _props(**types: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: v if isinstance(v, dict) else {"type": v} for k, v in types.items()},
    }


TOOL_SCHEMAS = {
    "get_order": _props(order_id="string"),
    "cancel_order": _props(order_id="string", reason="string"),
    "create_refund": _props(
        order_id="string",
        amount={"anyOf": [{"type": "number"}, {"type": "null"}]},
        rush={"type": "boolean", "default": False},
        meta="object",
    ),
    "tag_order": _props(order_id="string", amount="string"),
    "void_refund": _props(refund_id="string"),
}

HEAD = """\
version: 2
name: shop
tables:
  orders: shop_orders
  refunds: shop_refunds
tools:
  get_order: read
  cancel_order: irreversible
  create_refund: {effect: irreversible}
  tag_order: write
rules:
"""
SOURCE = '    source: {ref: "Shop policy §1", quote: "Only open orders are cancelled."}\n'


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _load(path: Path, **kwargs: Any) -> PolicyPack:
    options: dict[str, Any] = {
        "schema": SCHEMA,
        "column_types": COLUMN_TYPES,
        "tools": list(TOOL_SCHEMAS),
        "tool_schemas": TOOL_SCHEMAS,
    }
    options.update(kwargs)
    return load_policy(path, **options)


def _rule(body: str, *, rule_id: str = "shop.r", phase: str = "before", tools: str = "[cancel_order]") -> str:
    lines = [f"  - id: {rule_id}", f"    phase: {phase}"]
    if tools:
        lines.append(f"    tools: {tools}")
    return (
        "\n".join(lines) + "\n" + SOURCE + "    message: m\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )


# -- constructs ---------------------------------------------------------------------------------------
def test_every_v2_construct_loads_and_lowers(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text("def nothing(ctx):\n    return []\n", encoding="utf-8")
    path = _write(
        tmp_path,
        """\
        version: 2
        name: shop
        domain: shop
        module: rules.py
        tables: {orders: shop_orders, refunds: shop_refunds}
        surface: listed
        tools:
          get_order: {effect: read, retry: {max_attempts: 3, idempotent: true}}
          cancel_order:
            effect: irreversible
            approval:
              when: "EXISTS (SELECT 1 FROM orders o WHERE o.id = args.order_id AND o.total > 500)"
              source: {ref: "Ops §2", quote: "Cancelling a large order needs a supervisor."}
          create_refund:
            effect: irreversible
            retry: {max_attempts: 1, idempotent: false}
            compensation: {tool: void_refund, arguments: {refund_id: order_id}}
          tag_order: {effect: write, visible: false}
          void_refund: write
        rules:
          - id: shop.cancel.open_only
            phase: before
            tools: [cancel_order]
            source: {ref: "Shop §1", quote: "Only open orders are cancelled."}
            message: Only open orders can be cancelled.
            require: {from: orders o, where: o.id = args.order_id, that: o.status = 'open'}
          - id: shop.refund.positive
            phase: before
            tools: [create_refund]
            source: {ref: "Shop §2"}
            message: A refund is positive.
            forbid: {where: args.amount <= 0}
          - id: shop.python
            phase: after
            tools: [create_refund]
            source: {ref: "Shop §3"}
            message: m
            python: nothing
          - id: shop.refunds.cover
            phase: commit
            source: {ref: "Shop §4"}
            message: m
            sql: |
              SELECT r.order_id FROM refunds r GROUP BY r.order_id HAVING SUM(r.amount) < 0
        approvals:
          - id: shop.irreversible
            effect: irreversible
            source: {ref: "Risk §1"}
        """,
    )
    pack = _load(path, domain="shop")
    assert pack.model.version == 2 and pack.typed
    assert [(c.id, c.phase) for c in pack.checks] == [
        ("shop.cancel.open_only", "before_call"),
        ("shop.refund.positive", "before_call"),
        ("shop.python", "after_call"),
        ("shop.refunds.cover", "at_commit"),
    ]
    assert pack.body_counts() == {"forbid": 1, "require": 1, "python": 1, "sql": 1}
    assert pack.allows("get_order") and not pack.allows("tag_order") and not pack.allows("list_orders")
    assert pack.effect_of("tag_order") is EffectClass.WRITE
    retry = pack.retry_for("create_refund")
    assert retry is not None and (retry.max_attempts, retry.idempotent) == (1, False)
    compensation = pack.compensation_for("create_refund")
    assert compensation is not None and compensation.tool == "void_refund"
    assert [a.id for a in pack.model.approvals] == ["cancel_order.approval", "shop.irreversible"]
    assert set(pack.conditions) == {"cancel_order.approval"}
    sql = pack.checks[0].sql  # type: ignore[attr-defined]
    assert "shop_orders" in sql and "CAST(:order_id AS TEXT)" in sql and "orders o" not in sql


def test_surface_all_shows_every_tool_but_the_hidden(tmp_path: Path) -> None:
    path = _write(tmp_path, "version: 2\nname: s\nsurface: all\ntools: {tag_order: {visible: false}}\n")
    pack = _load(path)
    assert pack.allows("list_orders") and pack.allows("get_order") and not pack.allows("tag_order")
    assert pack.effect_of("tag_order") is None


def test_arguments_are_bound_as_their_schema_type() -> None:
    assert ArgSpec("number").bind({"amount": "12.5"}, "amount") == 12.5
    assert ArgSpec("integer").bind({"n": 3.0}, "n") == 3
    assert ArgSpec("boolean", default=False).bind({}, "rush") is False
    assert ArgSpec("boolean").bind({"rush": "true"}, "rush") is True
    assert ArgSpec("string").bind({"id": 7}, "id") == "7"
    assert ArgSpec().bind({"x": {"a": 1}}, "x") == {"a": 1}
    for spec, value in ((ArgSpec("number"), True), (ArgSpec("integer"), 2.5), (ArgSpec("boolean"), "yes")):
        with pytest.raises(ArgumentValueError):
            spec.bind({"x": value}, "x")


def test_without_tool_schemas_arguments_are_untyped_and_check_says_so(tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + _rule("forbid: {from: orders o, where: o.id = args.order_id}"))
    pack = load_policy(path)
    assert not pack.typed
    assert pack.checks[0].sql.count(":order_id") == 2  # type: ignore[attr-defined]
    assert "CAST(" not in pack.checks[0].sql  # type: ignore[attr-defined]
    result = CliRunner().invoke(app, ["check", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "(format v2)" in result.output and "args untyped: no tool schemas known" in result.output


def test_v1_packs_still_load_and_v1_cannot_use_when(tmp_path: Path) -> None:
    example = load_policy(ROOT / "policies" / "example" / "policy.yaml")
    assert example.model.version == 1 and example.document is None
    path = _write(
        tmp_path,
        """\
        version: 1
        name: old
        approvals:
          - id: old.big
            tools: [create_refund]
            when: args.amount > 5
            source: {ref: r}
        """,
    )
    with pytest.raises(PolicyError, match="need 'version: 2'") as info:
        load_policy(path)
    assert (info.value.rule, info.value.line) == ("old.big", 6)


# -- load errors: file, rule, line ----------------------------------------------------------------------
BAD: dict[str, tuple[str, str, int, str]] = {
    "unknown alias": (
        _rule("forbid: {from: ordrs o, where: o.id = args.order_id}"),
        "shop.r",
        17,
        "unknown table alias 'ordrs'",
    ),
    "unknown column": (
        _rule(
            """\
            forbid:
              from: orders o
              where: |
                o.id = args.order_id
                AND o.state = 'open'
            """
        ),
        "shop.r",
        21,
        "Unknown column: state",
    ),
    "unknown argument": (
        _rule("require: {from: orders o, where: o.id = args.order_no, that: o.status = 'open'}"),
        "shop.r",
        17,
        "tool 'cancel_order' has no argument 'order_no'",
    ),
    "type mismatch: text column vs number": (
        _rule(
            """\
            forbid:
              from: orders o
              where: o.id = args.order_id AND o.status > 5
            """
        ),
        "shop.r",
        19,
        "type mismatch: o.status is text, 5 is number",
    ),
    "type mismatch: number argument vs string literal": (
        _rule("forbid: {where: args.amount = 'ten'}", tools="[create_refund]"),
        "shop.r",
        17,
        "type mismatch: args.amount is number, 'ten' is text",
    ),
    "type mismatch: argument types differ between tools": (
        _rule("forbid: {where: args.amount > 1}", tools="[create_refund, tag_order]"),
        "shop.r",
        17,
        "type mismatch: args.amount has different types in the rule's tools",
    ),
    "object argument in SQL": (
        _rule("forbid: {where: args.meta IS NOT NULL}", tools="[create_refund]"),
        "shop.r",
        17,
        "args.meta is an object in create_refund's input schema and cannot be used in SQL: use a python",
    ),
    "unknown function": (
        _rule('forbid: {from: orders o, where: "lower_amount(o.total) > 1"}'),
        "shop.r",
        17,
        "unknown function lower_amount()",
    ),
    "arguments at commit": (
        _rule("forbid: {from: orders o, where: o.id = args.order_id}", phase="commit", tools=""),
        "shop.r",
        16,
        "a commit rule sees no call",
    ),
    "rule tool not listed": (
        _rule("forbid: {where: args.order_id = 'x'}", tools="[get_order, refund_all]"),
        "shop.r",
        14,
        "tool 'refund_all' is not listed under 'tools:'",
    ),
    "expression that does not parse": (
        _rule(
            """\
            require:
              from: orders o
              that: |
                o.status = 'open'
                AND o.total >
            """
        ),
        "shop.r",
        21,
        "expression does not parse",
    ),
    "missing source": (
        "  - id: shop.nosource\n    phase: before\n    tools: [cancel_order]\n    message: m\n"
        "    forbid: {where: args.order_id = 'x'}\n",
        "shop.nosource",
        12,
        "rules.0.source: Field required",
    ),
    "two bodies": (
        _rule("forbid: {where: args.order_id = 'x'}\npython: nothing\n"),
        "shop.r",
        12,
        "exactly one of 'forbid', 'require', 'python' or 'sql'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_v2_pack_names_file_rule_and_line(tmp_path: Path, case: str) -> None:
    body, rule, line, fragment = BAD[case]
    path = tmp_path / "policy.yaml"
    path.write_text(HEAD + body, encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        _load(path)
    error = info.value
    assert (error.file, error.rule, error.line) == (str(path), rule, line), str(error)
    assert str(error).startswith(f"{path}: line {line}: rule {rule}: "), str(error)
    assert fragment in str(error), str(error)


BAD_SECTIONS = {
    "duplicate tool entry": (
        "version: 2\nname: d\ntools:\n  get_order: read\n  cancel_order: write\n  get_order: write\n",
        "tools.get_order",
        6,
        "duplicate key 'tools.get_order'",
    ),
    "approval condition on a missing argument": (
        """\
        version: 2
        name: a
        tables: {orders: shop_orders}
        tools:
          cancel_order:
            effect: irreversible
            approval:
              source: {ref: r}
              when: args.total > 5
        """,
        "cancel_order.approval",
        9,
        "has no argument 'total'",
    ),
    "unknown tool entry": (
        "version: 2\nname: t\nsurface: all\ntools:\n  get_order: read\n  get_ordr: {visible: false}\n",
        "tools.get_ordr",
        6,
        "unknown tool 'get_ordr'",
    ),
    "unknown physical table of an alias": (
        "version: 2\nname: t\ntables:\n  orders: shop_orders\n  gone: shop_gone\n",
        "tables.gone",
        5,
        "table 'shop_gone' (alias 'gone') does not exist",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SECTIONS))
def test_bad_v2_pack_section_names_the_entry_and_line(tmp_path: Path, case: str) -> None:
    text, rule, line, fragment = BAD_SECTIONS[case]
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        _load(path)
    assert (info.value.rule, info.value.line) == (rule, line), str(info.value)
    assert fragment in str(info.value)


# -- behaviour on a real domain, SQLite and PostgreSQL --------------------------------------------------
MINI = """\
version: 2
name: mini
domain: sandbox_external_retail
tables:
  orders: external_retail_toolset_oms_models_orders
  payments: external_retail_toolset_stripe_models_payment_transactions
  refunds: external_retail_toolset_stripe_models_refunds
tools:
  get_order: read
  cancel_order: irreversible
  create_refund:
    effect: irreversible
    approval:
      when: |
        args.amount > 400
        OR EXISTS (SELECT 1 FROM orders o WHERE o.id = args.order_id AND o.status = 'shipped')
      source: {ref: "Ops §1", quote: "Large refunds, and refunds on orders in transit, are approved."}
  zendesk_delete_item: {effect: irreversible, visible: false}
rules:
  - id: mini.cancel.open_only
    phase: before
    tools: [cancel_order]
    source: {ref: "KB §8.1"}
    message: Only pending or processing orders are cancelled.
    require:
      from: orders o
      where: o.id = args.order_id
      that: o.status IN ('pending_payment', 'processing')
  - id: mini.refund.within_paid
    phase: before
    tools: [create_refund]
    source: {ref: "KB §9.2"}
    message: No more than was paid.
    require:
      that: |
        args.amount > 0 AND amount_at_most(args.amount,
          (SELECT COALESCE(SUM(p.amount), 0) FROM payments p
           WHERE p.order_id = args.order_id AND p.status = 'authorized'))
  - id: mini.cancel.not_large
    phase: after
    tools: [cancel_order]
    source: {ref: "Ops §2"}
    message: Large orders are not cancelled here.
    forbid: {from: orders o, where: o.id = args.order_id AND o.status = 'cancelled' AND o.total_amount > 1000}
  - id: mini.refunds.small
    phase: commit
    source: {ref: "Ops §3"}
    message: Refunds stay small.
    forbid: {from: refunds r, where: r.amount > 40}
"""


def _verdicts(retail: Domain, database: Database, pack: PolicyPack) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    with Environment(retail, database) as env:
        session = GuardSession(backend_for(env), executor_for(env), tool_infos(env), pack, session_id="v2")
        calls: list[tuple[str, dict[str, Any]]] = [
            ("cancel_order", {"order_id": "ORD-10000001", "cancellation_reason": "customer_request"}),
            ("cancel_order", {"order_id": "ORD-10000002", "cancellation_reason": "customer_request"}),
            ("zendesk_delete_item", {"table": "tickets", "id": "1"}),
            (
                "create_refund",
                {
                    "order_id": "ORD-10000002",
                    "customer_id": "CUS-10000002",
                    "amount": "520",
                    "refund_reason": "order_cancelled",
                },
            ),
            (
                "create_refund",
                {
                    "order_id": "ORD-10000002",
                    "customer_id": "CUS-10000002",
                    "amount": 450,
                    "refund_reason": "order_cancelled",
                },
            ),
            (
                "create_refund",
                {
                    "order_id": "ORD-10000001",
                    "customer_id": "CUS-10000001",
                    "amount": 10,
                    "refund_reason": "order_cancelled",
                },
            ),
            (
                "create_refund",
                {
                    "order_id": "ORD-10000002",
                    "customer_id": "CUS-10000002",
                    "amount": 50,
                    "refund_reason": "order_cancelled",
                },
            ),
        ]
        for tool, arguments in calls:
            outcome = session.call(tool, arguments)
            out.append((outcome.verdict.value, [v.rule_id for v in outcome.violations]))
            if tool == "cancel_order" and outcome.verdict is Verdict.REFUSED:
                assert outcome.violations[0].rows == [
                    {"o.id": "ORD-10000001", "o.status": "shipped", "args.order_id": "ORD-10000001"}
                ]
        commit = session.commit()
        out.append(("commit", [v.rule_id for v in commit.violations]))
        session.rollback()
    return out


def test_a_v2_pack_behaves_the_same_on_sqlite_and_postgresql(
    tmp_path: Path, retail: Domain, database: Database
) -> None:
    pack = load_domain_policy(_write(tmp_path, MINI), retail)
    assert _verdicts(retail, database, pack) == [
        ("refused", ["mini.cancel.open_only"]),
        ("rolled_back", ["mini.cancel.not_large"]),
        ("refused", ["tool_not_allowed"]),
        ("refused", ["mini.refund.within_paid"]),  # "520" is typed as a number: above the 499.99 paid
        ("held", ["create_refund.approval"]),  # args.amount > 400
        ("held", ["create_refund.approval"]),  # the order is shipped (state read before the call)
        ("allowed", []),  # neither holds
        ("commit", ["mini.refunds.small"]),
    ]


def test_approval_condition_holds_or_not_and_fails_closed(tmp_path: Path, retail: Domain) -> None:
    pack = load_domain_policy(_write(tmp_path, MINI), retail)
    effect = EffectClass.IRREVERSIBLE
    with Environment(retail, Database()) as env:
        backend = backend_for(env)
        backend.begin()
        small = {"order_id": "ORD-10000002", "amount": 10}
        assert pack.approval_for("create_refund", effect, small, backend.query) is None
        assert pack.approval_for("create_refund", effect, {**small, "amount": 401}, backend.query) is not None
        shipped = {"order_id": "ORD-10000001", "amount": 10}
        assert pack.approval_for("create_refund", effect, shipped, backend.query) is not None
        # no amount: the condition is NULL, and an undecidable condition holds the call
        assert (
            pack.approval_for("create_refund", effect, {"order_id": "ORD-10000002"}, backend.query)
            is not None
        )
        assert pack.approval_for("create_refund", effect, small) is not None  # no query: fail closed
        assert pack.approval_for("get_order", EffectClass.READ, small, backend.query) is None
        backend.rollback()


def test_the_retail_pack_is_v2_and_says_what_check_prints(bench: Any) -> None:
    result = CliRunner().invoke(
        app, ["check", str(RETAIL_PACK), "--domain", "sandbox_external_retail", "--data", str(bench.bundle)]
    )
    assert result.exit_code == 0, result.output
    assert "(format v2): 35 rules" in result.output
    assert "args typed from the tools' input schemas" in result.output
    text = (RETAIL_PACK / "policy.yaml").read_text(encoding="utf-8")
    assert "CAST(" not in text and "0.0101" not in text and "COALESCE(:" not in text
    assert "external_retail_toolset_" not in text.split("tables:")[1].split("surface:")[1]


# -- check --migrate ------------------------------------------------------------------------------------
def test_migrate_turns_a_v1_pack_into_an_equivalent_v2_pack(tmp_path: Path) -> None:
    from proxy.demo.server import TOOLS, metadata

    refs: dict[str, Any] = {
        "schema": {name: [c.name for c in table.columns] for name, table in metadata.tables.items()},
        "tools": [t.name for t in TOOLS],
        "tool_schemas": {t.name: t.input_schema for t in TOOLS},
    }
    example = ROOT / "policies" / "example" / "policy.yaml"
    result = CliRunner().invoke(app, ["check", str(example), "--migrate"])
    assert result.exit_code == 0, result.output
    migrated = _write(tmp_path, result.output)
    old, new = load_policy(example, **refs), load_policy(migrated, **refs)
    assert new.model.version == 2
    assert [(c.id, c.phase) for c in new.checks] == [(c.id, c.phase) for c in old.checks]
    assert new.model.tools.effects == old.model.tools.effects
    assert [t for t in refs["tools"] if new.allows(t)] == [t for t in refs["tools"] if old.allows(t)]
    assert [(r.tool, r.max_attempts, r.idempotent) for r in new.model.retry] == [
        (r.tool, r.max_attempts, r.idempotent) for r in old.model.retry
    ]
    assert new.model.approvals[0].when == "args.amount > 1000"

    def query(sql: str, params: Any) -> list[dict[str, Any]]:
        return [{"held": True}] if params["amount"] > 1000 else []

    for amount in (80, 1500):
        rule = new.approval_for("transfer_funds", EffectClass.IRREVERSIBLE, {"amount": amount}, query)
        before = old.approval_for("transfer_funds", EffectClass.IRREVERSIBLE, {"amount": amount})
        assert (rule is None) == (before is None), amount

    again = CliRunner().invoke(app, ["check", str(migrated), "--migrate"])
    assert again.exit_code == 1 and "already format v2" in again.output
