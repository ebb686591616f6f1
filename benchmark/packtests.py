"""Table-driven policy-pack tests: ``shadowguard check PACK --test`` (the pack author's ``opa test``).

A pack's tests live beside it in ``tests.yaml``::

    world:                                  # optional: rows upserted under every case's own patch
      external_retail_toolset_salesforce_models_customers: [{id: CUS-1, ...}]
    cases:
      - name: a shipped order cannot be cancelled
        patch:                              # rows upserted over the domain's defaults (a data_patch)
          external_retail_toolset_oms_models_orders: [{id: ORD-1, status: shipped, ...}]
        calls:
          - tool: cancel_order
            arguments: {order_id: ORD-1, reason: customer_request}
            expect: [retail.cancel_order.eligible_status]   # the violations' rule ids; [] = allowed
        commit: []                          # optional: the at-commit rule ids ([] = it commits)

Each case runs in a fresh environment of the pack's domain (its defaults, then ``world``, then the
case's ``patch``; a row of the patch replaces the world's row with the same key) through a
``GuardSession`` with the whole pack (held calls are reported, not queued). A case passes when every
call's rule ids, and the commit's when given, are exactly the expected ones. Coverage: a rule that no
case expects is listed, because removing it would fail no test; ``--require-coverage`` makes that a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, executor_for, tool_infos
from guard.policy import PolicyPack
from guard.session import GuardSession


class PackTestError(ValueError):
    """A tests file that cannot be used; the message names the file and the field."""


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    expect: list[str]


class _Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    patch: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    calls: list[_Call] = Field(default_factory=list)
    commit: list[str] | None = None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    world: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    cases: list[_Case] = Field(min_length=1)


@dataclass
class CaseResult:
    name: str
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def tests_path(pack: Path) -> Path:
    """``tests.yaml`` beside the pack's YAML (``pack`` may be the folder or the file)."""
    folder = pack if pack.is_dir() else pack.parent
    return folder / "tests.yaml"


def load_tests(path: Path, domain: Domain) -> list[_Case]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PackTestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PackTestError(f"{path}: not YAML: {exc}") from None
    try:
        tests = _File.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(file)"
        raise PackTestError(f"{path}: field {where}: {first['msg']}") from None
    unknown = sorted(set(tests.world) - set(domain.tables))
    if unknown:
        raise PackTestError(f"{path}: field world: {domain.name} has no table(s) {', '.join(unknown)}")
    cases = tests.cases
    for i, case in enumerate(cases):
        for j, call in enumerate(case.calls):
            if call.tool not in domain.tools:
                raise PackTestError(
                    f"{path}: field cases.{i}.calls.{j}.tool: {domain.name} has no tool {call.tool!r}"
                )
        unknown = sorted(set(case.patch) - set(domain.tables))
        if unknown:
            raise PackTestError(
                f"{path}: field cases.{i}.patch: {domain.name} has no table(s) {', '.join(unknown)}"
            )
        if tests.world:
            tables = list(tests.world) + [t for t in case.patch if t not in tests.world]
            case.patch = {t: tests.world.get(t, []) + case.patch.get(t, []) for t in tables}
    return cases


def run_case(case: _Case, domain: Domain, database: Database, pack: PolicyPack) -> CaseResult:
    result = CaseResult(case.name)
    with Environment(domain, database) as env:
        env.apply_patch(case.patch, where=f"{case.name}: patch")
        session = GuardSession(
            backend_for(env), executor_for(env), tool_infos(env), pack, session_id=case.name
        )
        for i, call in enumerate(case.calls):
            outcome = session.call(call.tool, call.arguments)
            got = [v.rule_id for v in outcome.violations]
            if sorted(got) != sorted(call.expect):
                result.problems.append(
                    f"call {i} {call.tool}: expected {call.expect or 'allowed'}, got {got or 'allowed'} "
                    f"({outcome.verdict.value})"
                )
        if case.commit is not None:
            commit = session.commit()
            got = [v.rule_id for v in commit.violations]
            if sorted(got) != sorted(case.commit):
                result.problems.append(
                    f"commit: expected {case.commit or 'committed'}, got {got or 'committed'}"
                )
            if not commit.committed:
                session.rollback()
        else:
            session.rollback()
    return result


def uncovered(pack: PolicyPack, cases: Sequence[_Case]) -> list[str]:
    """The pack's rules (checks and approval rules) that no case expects."""
    expected = {rule for c in cases for call in c.calls for rule in call.expect} | {
        rule for c in cases for rule in c.commit or ()
    }
    rules = [c.id for c in pack.checks] + [a.id for a in pack.model.approvals]
    return [r for r in rules if r not in expected]
