"""search_policy / knowledge_base_search_policy: the offline FTS5 ranker over the scenario policy sections.

No reference output exists for a successful search, so these tests check that the ranking is sensible
(the section a query is about comes first), the output has the reference's shape, and the input handling.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from benchmark.envs import DataError, Environment
from benchmark.envs.search import load_sections, make_search_tool, passages, policy_index, query_terms
from benchmark.tasks import BenchData
from tests.support.envs import domain_fixture

RETAIL = "sandbox_external_retail"

domain = domain_fixture(RETAIL)


def search(env: Environment, **args: Any) -> list[dict[str, Any]]:
    out: dict[str, list[dict[str, Any]]] = json.loads(env.call_tool("search_policy", args))
    assert list(out) == ["snippets"]
    return out["snippets"]


class SearchArgs(BaseModel):
    """The search tools' input (their model is built from the tool schema at run time)."""

    query: str
    max_results: int | None = None


def run_tool(bundle: Path, scenario: str, query: str, max_results: int | None = 3) -> list[dict[str, Any]]:
    """Calls a scenario's tool function directly (only retail has a domain to go through yet)."""
    tool = make_search_tool(scenario)
    fake_env = SimpleNamespace(domain=SimpleNamespace(bundle=bundle))
    out = tool(fake_env, SearchArgs(query=query, max_results=max_results))  # type: ignore[arg-type]
    hits: list[dict[str, Any]] = out["snippets"]
    return hits


def test_return_window_query_ranks_the_returns_section_first(env: Environment, bench: BenchData) -> None:
    hits = search(env, query="How long is the return window?")
    assert hits[0]["source"] == "Returns and Exchanges.md"
    assert len(hits) == 3
    sections = {s.source: s.text for s in load_sections(bench.bundle, RETAIL)}
    for hit in hits:
        assert list(hit) == ["source", "score", "vector_distance", "text"]
        assert hit["text"] == sections[hit["source"]]
        assert hit["score"] > 0
        assert hit["vector_distance"] == pytest.approx(1 / (1 + hit["score"]), abs=1e-6)
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert [h["vector_distance"] for h in hits] == sorted(h["vector_distance"] for h in hits)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Plus membership annual fee", "Membership Management.md"),
        ("promo code discount dispute", "Payment and Discount Disputes.md"),
        ("cancel my order", "Order Modifications.md"),
        ("customer tiers vip", "Customer Segmentation and Tiers.md"),
    ],
)
def test_retail_queries_find_their_section(env: Environment, query: str, expected: str) -> None:
    assert search(env, query=query)[0]["source"] == expected


@pytest.mark.parametrize(
    ("scenario", "query", "expected"),
    [
        ("external_booking_v1", "cancel booking refund", "cancellations_refunds.md"),
        ("sandbox_auto_insurance", "add a driver to the policy", "policy_servicing_drivers.md"),
        ("sandbox_neobank_support_v1", "reset my MFA", "password_mfa_account_access.md"),
        ("sandbox_consulting", "expense report rejected", "Expense_Support_Requests.md"),
    ],
)
def test_other_domains_rank_their_sections(
    bench: BenchData, scenario: str, query: str, expected: str
) -> None:
    hits = run_tool(bench.bundle, scenario, query)
    assert hits[0]["source"] == expected
    assert len({h["source"] for h in hits}) == len(hits)


def test_max_results_default_and_clamping(env: Environment) -> None:
    broad = "customer order policy return refund shipping membership installation warranty discount"
    assert len(search(env, query=broad)) == 3
    assert len(search(env, query=broad, max_results=None)) == 3
    assert len(search(env, query=broad, max_results=0)) == 1
    assert len(search(env, query=broad, max_results=-5)) == 1
    assert len(search(env, query=broad, max_results=50)) == 9  # every retail section, at most 10


@pytest.mark.parametrize("query", ["", "?!", '"** ( ) : ^ -+ "', "   "])
def test_query_without_words_returns_no_snippets(env: Environment, query: str) -> None:
    assert search(env, query=query) == []


def test_fts5_syntax_in_query_is_plain_text(env: Environment) -> None:
    hits = search(env, query='return" OR NEAR(window * AND -refund: {title}')
    assert hits and hits[0]["source"] == "Returns and Exchanges.md"
    assert query_terms('NEAR("a" b*) OR c_d') == ["near", "a", "b", "or", "c", "d"]


def test_words_not_in_any_section_return_nothing(env: Environment) -> None:
    assert search(env, query="xylophone quasar") == []


def test_invalid_input_is_rejected_by_the_schema(env: Environment) -> None:
    text = env.call_tool("search_policy", {"query": "returns", "max_results": "many"})
    assert text == json.dumps(
        {
            "error": "Tool execution failed: Input validation failed: max_results: "
            "Input should be a valid integer, unable to parse string as an integer",
            "tool": "search_policy",
        }
    )


def test_index_is_built_once_per_bundle_and_scenario(bench: BenchData) -> None:
    assert policy_index(bench.bundle, RETAIL) is policy_index(bench.bundle, RETAIL)


def _bundle(tmp_path: Path, scenario: str, world: Any) -> Path:
    folder = tmp_path / "data" / "dataset" / "scenario"
    folder.mkdir(parents=True)
    (folder / f"{scenario}.yaml").write_text(
        yaml.safe_dump({"world_state": {scenario: world}}), encoding="utf-8"
    )
    return tmp_path


def test_escaped_newlines_multi_snippet_sources_and_heading_passages(tmp_path: Path) -> None:
    sources = [
        {
            "name": "a.md",
            "snippets": ["## A\\n\\nGeneral text.\\n\\n### A.1 Lockers\\n\\nLocker keys.", "Locker rules."],
        },
        {"name": "b.md", "snippets": ["## B\\n\\nNothing relevant here."]},
    ]
    bundle = _bundle(tmp_path, "demo", {"sources": sources})
    assert passages(sources[0]["snippets"][0]) == [
        "## A\n\nGeneral text.\n\n",
        "### A.1 Lockers\n\nLocker keys.",
    ]
    hits = run_tool(bundle, "demo", "locker keys", max_results=10)
    assert [h["source"] for h in hits] == ["a.md"]
    assert hits[0]["text"] == sources[0]["snippets"][0]


@pytest.mark.parametrize(
    "world",
    [
        {},
        {"sources": "text"},
        {"sources": [{"name": "x.md"}]},
        {"sources": [{"name": "x.md", "snippets": [1]}]},
    ],
)
def test_malformed_scenario_sources_raise_data_error(tmp_path: Path, world: Any) -> None:
    bundle = _bundle(tmp_path, "bad", world)
    with pytest.raises(DataError, match=r"bad\.yaml"):
        load_sections(bundle, "bad")


def test_missing_scenario_file_raises_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found"):
        load_sections(tmp_path, "nowhere")
