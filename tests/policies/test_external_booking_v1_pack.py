"""The StayBridge (external_booking_v1) policy pack as a whole: it loads against its domain with the
expected tool surface, quotes the policy verbatim and names no record or task.

Its rule cases live in ``tests.yaml`` beside the pack
(``shadowguard check policies/external_booking_v1 --test``); tests/policies/test_pack_cases.py runs
them as pytest items on SQLite and PostgreSQL and requires every rule to be expected by a case.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from benchmark.envs import Domain, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.tasks import BenchData
from guard.models import EffectClass
from guard.policy import PolicyPack

DOMAIN = "external_booking_v1"
PACK = Path(__file__).resolve().parents[2] / "policies" / DOMAIN / "policy.yaml"


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def booking(bench: BenchData) -> Domain:
    return load_domain(DOMAIN, bench.bundle)


@pytest.fixture(scope="module")
def pack(booking: Domain) -> PolicyPack:
    return load_domain_policy(PACK, booking)


def test_pack_loads_against_its_domain(pack: PolicyPack, booking: Domain) -> None:
    model = pack.model
    assert model.domain == DOMAIN
    assert not pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(booking.tools)
    writes = {n for n, t in booking.tools.items() if t.writes and n != "knowledge_base_search_policy"}
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    assert len(writes) == 10 and len(irreversible) == 6  # SPEC §4: 10 write state, 6 irreversible
    assert not model.approvals  # approvals hold calls; every correct trajectory must commit


# -- quotes -----------------------------------------------------------------------------------------
def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def _policy_corpus(bench: BenchData) -> str:
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{DOMAIN}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{DOMAIN}.system_prompt.md").read_text(encoding="utf-8")
    text = html.unescape(text)
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
    return _normalise(text)


def test_rules_quote_the_policy_and_name_no_records(bench: BenchData, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench)
    for rule in pack.model.checks:
        assert rule.source.quote, rule.id
        assert rule.source.ref, rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(r"\b(?:BKG|CUS|HTL|GRP|CRP|TXN|TCK|USR|ZDSK|DSP|INV|ORG)-\w|test_[a-z]{3}_\d{3}")
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"
