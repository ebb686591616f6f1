"""The benchmark domains' policy packs as wholes (the retail pack's behaviour is tested in
tests/guard/packs/): each loads against its domain with the expected tool surface, every rule quotes
the domain's policy text verbatim, and the pack names no record or task.

The packs' rule cases live in ``tests.yaml`` beside each pack (``shadowguard check policies/<domain>
--test``); tests/policies/test_pack_cases.py runs them as pytest items on SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.replay import replay
from benchmark.tasks import BenchData, Task
from guard.models import EffectClass
from guard.policy import PolicyPack

POLICIES = Path(__file__).resolve().parents[2] / "policies"
SENTENCE_END = re.compile(r"(?<=[a-z`)\"0-9])\. (?=[A-Z`$])")


@dataclass(frozen=True)
class Spec:
    """What one pack must look like. Counts are the domain's tools that write state and those the
    pack classes business-irreversible (from the domain's tool descriptions)."""

    domain: str
    writes: int | None
    irreversible: int | None
    record_ids: str  # a record's or a task's id in the domain's data; a pack must not name one
    hidden: frozenset[str] = frozenset({"zendesk_delete_item"})
    extra_writes: frozenset[str] = frozenset()  # tools with a side effect the domain does not record
    split_sentences: bool = True  # quotes are checked sentence by sentence, else fragment by fragment
    zendesk_articles: bool = False  # rules may quote the Zendesk articles the policy sends agents to
    table_borders: bool = False  # the policy text has Markdown tables whose borders are dropped
    ref_prefixes: tuple[str, ...] = field(default=())


SPECS = [
    Spec(
        "external_booking_v1",
        writes=10,
        irreversible=6,
        record_ids=r"\b(?:BKG|CUS|HTL|GRP|CRP|TXN|TCK|USR|ZDSK|DSP|INV|ORG)-\w|test_[a-z]{3}_\d{3}",
    ),
    Spec(
        "sandbox_auto_insurance",
        writes=14,
        irreversible=8,
        record_ids=r"\b(?:POL|CUS|VEH|DRV|CLM|BILL|DOC|VIOLATION)-\w|test_|\b(?:bil|fnol)_\d",
        hidden=frozenset({"zendesk_delete_item", "billing_reset_account_status"}),
        zendesk_articles=True,
    ),
    Spec(
        "sandbox_consulting",
        writes=None,
        irreversible=None,
        record_ids=r"\b(?:ENG|CAT|CLT|EXP|CRS|FLD|HWO|APR|ASN|LIC|ENR|TRV|AAL|VPN|CSA|FAL)-\d|\bMSG\d|test_\w+_\d",
        extra_writes=frozenset({"hardware_procurement_create_order"}),  # a purchase order: nothing undone
        ref_prefixes=("Policy KB", "System prompt"),
    ),
    Spec(
        "sandbox_neobank_support_v1",
        writes=13,
        irreversible=9,
        record_ids=r"\b(?:WD|OAA|APR|ASN|LAL|OGM|OSA|NTF|SEC|LIC|HW-ORDER)-\d|VDB-HW-\d|test_[a-z]{2}_\d",
        split_sentences=False,
        table_borders=True,
    ),
]
BY_DOMAIN = {spec.domain: spec for spec in SPECS}


@pytest.fixture(scope="module", params=[s.domain for s in SPECS])
def spec(request: pytest.FixtureRequest) -> Spec:
    return BY_DOMAIN[request.param]


@pytest.fixture(scope="module")
def domain(bench: BenchData, spec: Spec) -> Domain:
    return load_domain(spec.domain, bench.bundle)


@pytest.fixture(scope="module")
def pack(domain: Domain, spec: Spec) -> PolicyPack:
    return load_domain_policy(POLICIES / spec.domain / "policy.yaml", domain)


def test_pack_loads_against_its_domain(pack: PolicyPack, domain: Domain, spec: Spec) -> None:
    model = pack.model
    assert model.domain == spec.domain
    assert not model.approvals  # approvals hold calls; every correct trajectory must commit
    assert set(model.tools.effects) == set(domain.tools)
    assert {t for t in domain.tools if not pack.allows(t)} == spec.hidden
    writes = {n for n, t in domain.tools.items() if t.writes and n != "knowledge_base_search_policy"}
    writes |= spec.extra_writes
    assert {t for t, e in model.tools.effects.items() if e is not EffectClass.READ} == writes
    if spec.writes is not None:
        assert len(writes) == spec.writes
    irreversible = {t for t, e in model.tools.effects.items() if e is EffectClass.IRREVERSIBLE}
    if spec.irreversible is not None:
        assert len(irreversible) == spec.irreversible


def _normalise(text: str) -> str:
    text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)  # bullets and headings
    return re.sub(r"\s+", " ", text.replace("**", "").replace("\\", "")).strip().lower()


def _policy_corpus(bench: BenchData, domain: Domain, spec: Spec) -> str:
    """The texts a rule may quote: the policy KB, the system prompt, and the Zendesk articles where
    the policy sends agents to them."""
    folder = Path(bench.bundle) / "data" / "derived_policy"
    text = (folder / f"{spec.domain}.policy_kb_sources.md").read_text(encoding="utf-8")
    text += "\n" + (folder / f"{spec.domain}.system_prompt.md").read_text(encoding="utf-8")
    if spec.zendesk_articles:
        with Environment(domain, Database()) as env:
            for article in env.table("zendesk_articles").all():
                body = html.unescape(str(getattr(article, "body", "")))
                text += "\n" + re.sub(r"<[^>]+>", "\n", body)
    if spec.table_borders:
        text = re.sub(r"(?m)^[ \t]*(?:[-*]|#+)[ \t]+", "", text)
        text = re.sub(r"(?m)^[ \t]*\|?[ \t]*|[ \t]*\|?[ \t]*$", "", text)
    else:
        text = html.unescape(text)
    return _normalise(text)


def test_rules_quote_the_policy_verbatim(
    bench: BenchData, domain: Domain, pack: PolicyPack, spec: Spec
) -> None:
    """Every quote (fragments between "[...]") is in the policy texts, modulo whitespace and markup."""
    corpus = _policy_corpus(bench, domain, spec)
    for rule in pack.model.checks:
        assert rule.source is not None and rule.source.quote and rule.source.ref, rule.id
        assert rule.source.ref.startswith(spec.ref_prefixes or ("",)), rule.id
        for fragment in rule.source.quote.split("[...]"):
            pieces = SENTENCE_END.split(fragment) if spec.split_sentences else [fragment]
            for sentence in pieces:
                piece = _normalise(sentence).strip(" .:")
                assert not piece or piece in corpus, f"{rule.id}: {piece!r} is not in the policy text"


def test_pack_names_no_record_or_task(spec: Spec) -> None:
    """Identifiers appear only as the policy's formats (ENG-####### ...), never as a record's id."""
    ids = re.compile(spec.record_ids)
    folder = POLICIES / spec.domain
    checks = sorted((folder / "checks").glob("*.py")) or [folder / "checks.py"]
    for path in (folder / "policy.yaml", *checks):
        assert not ids.search(path.read_text(encoding="utf-8")), f"{path} names a record or task"


def test_consulting_licence_tool_is_not_retried(bench: BenchData) -> None:
    domain = load_domain("sandbox_consulting", bench.bundle)
    pack = load_domain_policy(POLICIES / "sandbox_consulting" / "policy.yaml", domain)
    rule = pack.retry_for("license_management_api")
    assert rule is not None and rule.max_attempts == 1


def test_neobank_golden_sample_commits_through_the_pack(bench: BenchData, sqlite_db: Database) -> None:
    """Every 4th neobank task replayed through the pack commits its golden end state (the CLI replays
    all of them)."""
    name = "sandbox_neobank_support_v1"
    pack = load_domain_policy(POLICIES / name / "policy.yaml", load_domain(name, bench.bundle))
    tasks: list[Task] = bench.tasks([name])[::4]
    result = replay(bench, sqlite_db, name, tasks, "guard", pack)
    assert [(t.task_id, t.messages) for t in result.tasks if not (t.committed and t.golden)] == []
    assert result.committed_golden == len(tasks) and result.violations == 0 and result.rolled_back == 0
