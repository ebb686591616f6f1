"""The sandbox_auto_insurance pack as a whole: it loads against its domain with the expected tool
surface, quotes the policy verbatim and names no record or task.

Its rule cases live in ``tests.yaml`` beside the pack
(``shadowguard check policies/sandbox_auto_insurance --test``); tests/policies/test_pack_cases.py runs
them as pytest items on SQLite and PostgreSQL and requires every rule to be expected by a case.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.tasks import BenchData
from guard.models import EffectClass
from guard.policy import PolicyPack

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "sandbox_auto_insurance" / "policy.yaml"
AUTO = "sandbox_auto_insurance"


@pytest.fixture(scope="module")
def auto(bench: BenchData) -> Domain:
    return load_domain(AUTO, bench.bundle)


@pytest.fixture(scope="module")
def pack(auto: Domain) -> PolicyPack:
    return load_domain_policy(PACK, auto)


def test_pack_loads_against_its_domain(pack: PolicyPack, auto: Domain) -> None:
    model = pack.model
    assert model.domain == AUTO
    assert set(model.tools.effects) == set(auto.tools)
    for cut in ("zendesk_delete_item", "billing_reset_account_status"):
        assert not pack.allows(cut)
    assert all(
        pack.allows(t) for t in auto.tools if t not in {"zendesk_delete_item", "billing_reset_account_status"}
    )
    writes = {
        name for name, tool in auto.tools.items() if tool.writes and name != "knowledge_base_search_policy"
    }
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    assert len(irreversible) == 8  # SPEC §4: 14 write state, 8 business-irreversible
    assert not model.approvals


def _policy_corpus(bench: BenchData, auto: Domain) -> str:
    """The texts a rule may quote: the KB, the system prompt and the Zendesk articles they send to."""
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{AUTO}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{AUTO}.system_prompt.md").read_text(encoding="utf-8")
    with Environment(auto, Database()) as env:
        for article in env.table("zendesk_articles").all():
            body = html.unescape(str(getattr(article, "body", "")))
            text += "\n" + re.sub(r"<[^>]+>", "\n", body)
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return _normalise(text)


def _normalise(text: str) -> str:
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def test_rules_quote_the_policy_and_name_no_records(bench: BenchData, auto: Domain, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench, auto)
    for rule in pack.model.checks:
        assert rule.source.quote and rule.source.ref, rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(r"\b(?:POL|CUS|VEH|DRV|CLM|BILL|DOC|VIOLATION)-\w|test_|\b(?:bil|fnol)_\d")
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"
