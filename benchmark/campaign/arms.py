"""The campaign's arms: one table of guard configurations, each lever switched on alone.

A lever is one thing the guard does that an arm can switch on:

==========  =================================================================================
validation  arguments checked against the tool's input schema before they are forwarded
retries     recoverable failures retried when that is safe (guard.retry)
checks      the pack's checks (before_call, after_call, at_commit)
approvals   irreversible calls (and the pack's approval rules) rehearsed and held for a reviewer
surface     the pack's tool allowlist
==========  =================================================================================

Every guarded arm runs in a shadow transaction and commits at the end (the orchestrator's commit);
the pack's effect classes are used in all of them (they decide what a retry or an approval may do,
they stop nothing alone). Every guarded arm also classifies a failed call and answers it with the
class and what to do next (guard.errors; the pack's ``errors.rules`` with it): the GuardSession does
that for every outcome that is not allowed, and no pack setting turns it off, so no lever owns it.
``base`` is that common part alone — guarded, no lever — and a lever's own effect is its arm against
``base``; against ``off`` every guarded arm also shows the base. ``off`` has no guard at all.
``oracle-ceiling`` is every lever plus the judge as an at-commit check: it reads the answer key, so its
figures are an upper bound, labelled so wherever they are printed — never the product.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from guard.models import EffectClass, PolicySource
from guard.policy import ApprovalRule, PolicyPack, PolicyPackModel

LEVERS = ("validation", "retries", "checks", "approvals", "surface")

IRREVERSIBLE_RULE = ApprovalRule(
    id="shadowguard.irreversible",
    source=PolicySource(
        ref="docs/approvals.md",
        quote="Some calls cannot be cheaply undone (refunds, payments, deletions, access grants).",
    ),
    effect=EffectClass.IRREVERSIBLE,
)


@dataclass(frozen=True)
class Arm:
    name: str
    description: str
    levers: frozenset[str] = frozenset()
    guarded: bool = True
    oracle: bool = False
    """The judge runs as an at-commit check (reads the answer key: an upper bound)."""

    @property
    def label(self) -> str:
        return f"{self.name} (upper bound: reads the answer key)" if self.oracle else self.name

    def has(self, lever: str) -> bool:
        return lever in self.levers

    def pack(self, pack: PolicyPack) -> PolicyPack:
        """``pack`` cut down to this arm's levers (effect classes kept; see the module docstring)."""
        model = pack.model
        errors = model.errors.model_copy(
            update={"validation": model.errors.validation if self.has("validation") else "off"}
        )
        tools = model.tools.model_copy(update={"allow": model.tools.allow if self.has("surface") else None})
        approvals = [*model.approvals, IRREVERSIBLE_RULE] if self.has("approvals") else []
        update = {
            "errors": errors,
            "tools": tools,
            "approvals": approvals,
            "checks": model.checks if self.has("checks") else [],
            "retry": model.retry if self.has("retries") else [],
        }
        cut: PolicyPackModel = model.model_copy(update=update)
        return dataclasses.replace(
            pack,
            model=cut,
            checks=list(pack.checks) if self.has("checks") else [],
            hidden=pack.hidden if self.has("surface") else frozenset(),
            conditions=dict(pack.conditions) if self.has("approvals") else {},
        )


ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm("off", "no guard: every call goes straight to the tools and is real at once", guarded=False),
        Arm("base", "guarded, no lever: shadow transaction, commit, failures classified with what to do"),
        Arm("validation", "arguments validated against the tool's input schema", frozenset({"validation"})),
        Arm("retries", "failures classified, recoverable ones retried when safe", frozenset({"retries"})),
        Arm("checks", "the pack's checks after each call and at commit", frozenset({"checks"})),
        Arm("approvals", "irreversible calls held for a reviewer", frozenset({"approvals"})),
        Arm("surface", "the pack's tool allowlist", frozenset({"surface"})),
        Arm("guard", "every lever: the product", frozenset(LEVERS)),
        Arm(
            "oracle-ceiling",
            "every lever plus the judge as an at-commit check (upper bound: reads the answer key)",
            frozenset(LEVERS),
            oracle=True,
        ),
    )
}


class ArmError(ValueError):
    pass


def parse_arms(spec: str) -> list[Arm]:
    """``off,guard`` -> the arms, in order; an unknown or repeated name is an error naming it."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ArmError("no arms given; e.g. --arms off,guard")
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        raise ArmError(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ArmError(f"arm(s) given twice: {', '.join(repeated)}")
    return [ARMS[n] for n in names]
