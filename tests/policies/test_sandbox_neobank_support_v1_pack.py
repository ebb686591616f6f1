"""The neobank policy pack (policies/sandbox_neobank_support_v1/) as a whole: it loads against its
domain, quotes the policy verbatim, names no record or task, and a sample of goldens commits through it.

Its rule cases live in ``tests.yaml`` beside the pack
(``shadowguard check policies/sandbox_neobank_support_v1 --test``); tests/policies/test_pack_cases.py runs
them as pytest items on SQLite and PostgreSQL and requires every rule to be expected by a case.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmark.envs import Database, Domain, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.replay import replay
from benchmark.tasks import BenchData, Task
from guard.models import EffectClass
from guard.policy import PolicyPack

DOMAIN = "sandbox_neobank_support_v1"
PACK = Path(__file__).resolve().parents[2] / "policies" / DOMAIN / "policy.yaml"


@pytest.fixture(scope="module")
def domain(bench: BenchData) -> Domain:
    return load_domain(DOMAIN, bench.bundle)


@pytest.fixture(scope="module")
def pack(domain: Domain) -> PolicyPack:
    return load_domain_policy(PACK, domain)


def test_pack_loads_against_its_domain(pack: PolicyPack, domain: Domain) -> None:
    model = pack.model
    assert model.domain == DOMAIN and not model.approvals
    assert not pack.allows("zendesk_delete_item")
    assert set(model.tools.effects) == set(domain.tools)
    writes = {
        name for name, tool in domain.tools.items() if tool.writes and name != "knowledge_base_search_policy"
    }
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    assert len(writes) == 13 and len(irreversible) == 9  # SPEC §4: 13 write state, 9 business-irreversible


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def _policy_corpus(bench: BenchData) -> str:
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{DOMAIN}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{DOMAIN}.system_prompt.md").read_text(encoding="utf-8")
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)  # bullets and headings
    text = re.sub(r"(?m)^[ \t]*\|?[ \t]*|[ \t]*\|?[ \t]*$", "", text)  # table borders
    return _normalise(text)


def test_quotes_are_verbatim_and_no_record_is_named(bench: BenchData, pack: PolicyPack) -> None:
    """Every quote (fragments between "[...]") is in the policy texts, modulo whitespace and markup."""
    corpus = _policy_corpus(bench)
    for rule in pack.model.checks:
        assert rule.source.quote and rule.source.ref, rule.id
        for fragment in rule.source.quote.split("[...]"):
            piece = _normalise(fragment).strip(" .:")
            assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"
    ids = re.compile(r"\b(?:WD|OAA|APR|ASN|LAL|OGM|OSA|NTF|SEC|LIC|HW-ORDER)-\d|VDB-HW-\d|test_[a-z]{2}_\d")
    for path in (PACK, PACK.with_name("checks.py")):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"


def test_golden_sample_commits_through_the_pack(
    bench: BenchData, sqlite_db: Database, pack: PolicyPack
) -> None:
    """Every 4th task replayed through the pack commits its golden end state (the CLI replays all)."""
    tasks: list[Task] = bench.tasks([DOMAIN])[::4]
    result = replay(bench, sqlite_db, DOMAIN, tasks, "guard", pack)
    assert [(t.task_id, t.messages) for t in result.tasks if not (t.committed and t.golden)] == []
    assert result.committed_golden == len(tasks) and result.violations == 0 and result.rolled_back == 0
