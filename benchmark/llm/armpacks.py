"""An arm's cut pack as a pack file, so that ``shadowguard serve`` runs the arm the way a deployment runs
any pack: named by its upstream's ``policy:`` in the proxy config.

:meth:`benchmark.campaign.arms.Arm.pack` cuts a loaded pack down to an arm's levers in memory (the
in-process campaign). :func:`write_arm_pack` writes the same cut as YAML in the pack's own format:

==========  =======================================================================================
lever off   in the written pack (format v2; a v1 pack is written from its cut model the same way)
==========  =======================================================================================
validation  ``errors.validation: off``
retries     no tool's ``retry``
checks      no ``rules`` (v1: no ``checks``)
approvals   no ``approvals`` and no tool's ``approval``; lever on: the arms' irreversible rule added
surface     ``surface: all`` and every tool visible (v1: no ``tools.allow``)
==========  =======================================================================================

The Python module a pack names beside its YAML is named by its absolute path. The written file is
loaded back and compared with the in-memory cut (model, hidden tools, approval conditions, checks);
a difference is an error, never a silently different arm.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmark.campaign.arms import IRREVERSIBLE_RULE, Arm
from guard.packv2 import Approval, PackV2
from guard.policy import PolicyPack

__all__ = ["ArmPackError", "arm_pack_document", "write_arm_pack"]


class ArmPackError(ValueError):
    """The arm cannot be written as a pack file, or the written file does not load as the same cut."""


def _module(pack: PolicyPack, module: str | None) -> str | None:
    if module is None or not module.endswith(".py") or pack.path is None:
        return module
    return str((pack.path.parent / module).resolve())


def _cut_v2(arm: Arm, doc: PackV2, module: str | None) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    for name, entry in doc.entries().items():
        update: dict[str, Any] = {}
        if not arm.has("retries"):
            update["retry"] = None
        if not arm.has("approvals"):
            update["approval"] = None
        if not arm.has("surface"):
            update["visible"] = True
        tools[name] = entry.model_copy(update=update)
    irreversible = Approval(
        id=IRREVERSIBLE_RULE.id, effect=IRREVERSIBLE_RULE.effect, source=IRREVERSIBLE_RULE.source
    )
    validation = doc.errors.validation if arm.has("validation") else "off"
    cut = doc.model_copy(
        update={
            "module": module,
            "surface": doc.surface if arm.has("surface") else "all",
            "tools": tools,
            "rules": doc.rules if arm.has("checks") else [],
            "approvals": [*doc.approvals, irreversible] if arm.has("approvals") else [],
            "errors": doc.errors.model_copy(update={"validation": validation}),
        }
    )
    return cut.model_dump(mode="json", by_alias=True, exclude_none=True)


def arm_pack_document(arm: Arm, pack: PolicyPack) -> dict[str, Any]:
    """``pack`` cut to ``arm``'s levers, as the YAML mapping of a pack file."""
    if not arm.guarded:
        raise ArmPackError(f"arm {arm.name} has no guard, so no pack")
    if arm.oracle:
        raise ArmPackError(
            f"arm {arm.name} reads the answer key (the judge as an at-commit check): no pack file holds it"
        )
    if isinstance(pack.document, PackV2):
        return _cut_v2(arm, pack.document, _module(pack, pack.document.module))
    model = arm.pack(pack).model
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["module"] = _module(pack, model.module)
    return {k: v for k, v in data.items() if v is not None}


def _same_cut(written: PolicyPack, cut: PolicyPack) -> list[str]:
    differences = []
    keep = {"module": True}
    if written.model.model_dump(exclude=keep) != cut.model.model_dump(exclude=keep):
        differences.append("the pack model")
    if written.hidden != cut.hidden:
        differences.append(f"hidden tools {sorted(written.hidden)} != {sorted(cut.hidden)}")
    if sorted(written.conditions) != sorted(cut.conditions):
        differences.append(f"approval conditions {sorted(written.conditions)} != {sorted(cut.conditions)}")
    if [c.id for c in written.checks] != [c.id for c in cut.checks]:
        differences.append("the compiled checks")
    return differences


def write_arm_pack(
    arm: Arm, pack: PolicyPack, folder: Path, load: Callable[[Path], PolicyPack]
) -> PolicyPack:
    """Write ``folder/policy.yaml``: ``pack`` cut to ``arm``'s levers; ``load`` (the loader ``pack`` came
    from) reads it back, and it must give :meth:`Arm.pack`'s cut, else :class:`ArmPackError`. Returns
    the pack read back (its ``path`` is the file written)."""
    document = arm_pack_document(arm, pack)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.yaml"
    source = str(pack.path) if pack.path is not None else "no pack (the empty pack)"
    header = (
        f"# Generated by the campaign: {source} cut to the levers of arm {arm.name}\n"
        f"# ({', '.join(sorted(arm.levers)) or 'none'}; benchmark/campaign/arms.py).\n"
    )
    path.write_text(header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")
    written = load(path)
    differences = _same_cut(written, arm.pack(pack))
    if differences:
        raise ArmPackError(f"{path}: the written pack of arm {arm.name} differs: {'; '.join(differences)}")
    return written
