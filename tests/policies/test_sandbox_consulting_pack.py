"""The consulting pack (policies/sandbox_consulting) as a whole: it loads against its domain, quotes
the policy verbatim and names no record or task.

Its rule cases live in ``tests.yaml`` beside the pack
(``shadowguard check policies/sandbox_consulting --test``); tests/policies/test_pack_cases.py runs
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

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "policies" / "sandbox_consulting" / "policy.yaml"
DOMAIN = "sandbox_consulting"


@pytest.fixture(scope="module")
def consulting(bench: BenchData) -> Domain:
    return load_domain(DOMAIN, bench.bundle)


@pytest.fixture(scope="module")
def pack(consulting: Domain) -> PolicyPack:
    return load_domain_policy(PACK, consulting)


# -- the pack as a whole -------------------------------------------------------------------------------
def test_pack_loads_against_its_domain(pack: PolicyPack, consulting: Domain) -> None:
    model = pack.model
    assert model.domain == DOMAIN and model.name == DOMAIN
    assert not pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(consulting.tools)
    assert set(model.tools.allow or ()) == set(consulting.tools) - {"zendesk_delete_item"}
    writes = {n for n, t in consulting.tools.items() if t.writes and n != "knowledge_base_search_policy"}
    writes.add("hardware_procurement_create_order")  # a purchase order: nothing recorded, nothing undone
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    assert not model.approvals
    assert pack.retry_for("license_management_api").max_attempts == 1


def _policy_corpus(bench: BenchData) -> str:
    """The consulting policy texts a rule may quote: the knowledge base and the system prompt."""
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{DOMAIN}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{DOMAIN}.system_prompt.md").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", html.unescape(text))
    return _normalise(text)


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def test_rules_quote_the_policy_verbatim(bench: BenchData, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]", sentence by sentence) is in the policy text verbatim."""
    corpus = _policy_corpus(bench)
    for rule in pack.model.checks:
        assert rule.source is not None and rule.source.quote and rule.source.ref, rule.id
        assert rule.source.ref.startswith(("Policy KB", "System prompt")), rule.id
        for fragment in rule.source.quote.split("[...]"):
            for sentence in re.split(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])", fragment):
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"


def test_pack_names_no_record_or_task() -> None:
    """Identifiers appear only as the policy's formats (ENG-####### ...), never as a record's id."""
    ids = re.compile(
        r"\b(?:ENG|CAT|CLT|EXP|CRS|FLD|HWO|APR|ASN|LIC|ENR|TRV|AAL|VPN|CSA|FAL)-\d|\bMSG\d|test_\w+_\d"
    )
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"
