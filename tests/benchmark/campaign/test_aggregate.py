"""``aggregate()`` and its renderings on hand-made rows, and on plain ``tb infer`` rows."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel
from rich.console import Console

from benchmark.campaign.aggregate import (
    Aggregate,
    KValue,
    aggregate,
    render_markdown,
    render_table,
    summary_line,
    to_json,
)
from benchmark.campaign.metrics import jeffreys_interval
from benchmark.campaign.prices import PriceError, PriceTable, load_prices
from benchmark.campaign.results import (
    DecodeResult,
    ParallelToolCall,
    ResultsError,
    TestResult,
    Text,
    ToolCall,
    ToolResponse,
    read_campaign_results,
)
from benchmark.campaign.signatures import failure_signature

RowFactory = Callable[..., DecodeResult]

A = "retail_group1.py:test_a"
B = "booking_group1.py:test_b"


def _campaign(make_row: RowFactory) -> list[DecodeResult]:
    """off: A 3/5 (2 wrong commits), B 5/5. guard: A 4/5 (1 held), B 4/5 (1 false block); every guard row
    has a judged twin, one approval request and 2 ms added."""
    rows = []
    for rep in range(5):
        rows.append(make_row(A, arm="off", rep=rep, outcome="success" if rep < 3 else "wrong_commit"))
        rows.append(make_row(B, arm="off", rep=rep, domain="booking"))
    guard = {"approvals": {"requested": 1, "approved": 1}, "added_ms": 2.0, "committed": True}
    for rep in range(5):
        rows.append(
            make_row(
                A,
                arm="guard",
                rep=rep,
                outcome="held" if rep == 4 else "success",
                guard=guard,
                twin_passed=True,
            )
        )
        rows.append(
            make_row(
                B,
                arm="guard",
                rep=rep,
                outcome="false_block" if rep == 0 else "success",
                domain="booking",
                guard=guard,
                twin_passed=True,
                signature="false_block" if rep == 0 else None,
            )
        )
    return rows


def _values(items: list[KValue]) -> dict[int, float]:
    return {i.k: i.value for i in items}


def test_per_arm_figures_by_hand(make_row: RowFactory) -> None:
    agg = aggregate(_campaign(make_row))
    assert [a.arm for a in agg.arms] == ["off", "guard"]
    off, guard = (a.overall for a in agg.arms)
    assert (off.attempts, off.tasks, off.passes, off.errors) == (10, 2, 8, 0)
    assert off.pass1 == 0.8
    low, high = jeffreys_interval(8, 10)
    assert (off.pass1_ci95.low, off.pass1_ci95.high) == (low, high)
    assert off.passk.n == 5 and off.passk.omitted is None
    assert _values(off.passk.pass_at_k) == {1: 0.8, 5: 1.0}
    assert _values(off.passk.pass_power_k) == pytest.approx({1: 0.8, 5: (0.6**5 + 1) / 2})
    assert _values(off.passk.pass_hat_k) == {1: 0.8, 5: 0.5}
    assert off.passk.observed_k_of_k == 1
    o = off.outcomes
    assert o.known and (o.success, o.wrong_commit, o.held, o.false_block) == (8, 2, 0, 0)
    assert (o.wrong_commit_rate, o.false_block_knowable, o.false_block_rate) == (0.2, 0, None)
    assert off.approvals_per_attempt == 0.0 and off.guard_added_ms_per_attempt == 0.0
    assert [(s.signature, s.count, s.share) for s in off.signatures] == [("wrong_state_update", 2, 1.0)]

    g = guard.outcomes
    assert guard.pass1 == 0.8 and guard.passk.observed_k_of_k == 0
    assert (g.success, g.wrong_commit, g.held, g.false_block) == (8, 0, 1, 1)
    assert (g.held_rate, g.false_block_knowable, g.false_block_rate) == (0.1, 10, 0.1)
    assert guard.approvals_per_attempt == 1.0 and guard.guard_added_ms_per_attempt == 2.0

    domains = {d.domain: d for d in agg.arms[0].domains}
    assert sorted(domains) == ["booking", "retail"]
    assert (domains["retail"].pass1, domains["booking"].pass1) == (0.6, 1.0)
    assert domains["retail"].outcomes.wrong_commit_rate == 0.4

    (lift,) = agg.lift
    assert (lift.arm, lift.pairs, lift.pass1, lift.off_pass1) == ("guard", 10, 0.8, 0.8)
    assert lift.pass1_change == 0.0 and lift.wrong_commit_change == pytest.approx(-0.2)
    assert [n for n in agg.notes if not n.startswith("base:")] == []  # the base note: test_base_lift


def test_errors_count_in_n_as_failures_and_are_kept_out_of_signatures(make_row: RowFactory) -> None:
    rows = [make_row(A, rep=0), make_row(A, rep=1, outcome=None), make_row(A, rep=2, outcome="wrong_commit")]
    s = aggregate(rows).arms[0].overall
    assert (s.attempts, s.passes, s.errors, s.pass1) == (3, 1, 1, 1 / 3)
    assert (s.outcomes.system_errors, s.outcomes.system_error_rate) == (1, 1 / 3)
    assert s.failures == 1 and [x.signature for x in s.signatures] == ["wrong_state_update"]


def test_unequal_attempts_omit_pass_at_k_and_say_so(make_row: RowFactory) -> None:
    rows = [make_row(A, rep=0), make_row(A, rep=1), make_row(B, rep=0)]
    agg = aggregate(rows)
    p = agg.arms[0].overall.passk
    assert (p.n, p.pass_at_k, p.pass_power_k, p.pass_hat_k, p.observed_k_of_k) == (None, [], [], [], None)
    assert p.omitted is not None and "unequal" in p.omitted
    assert any("as tb agg does" in note for note in agg.notes)
    assert "omitted (unequal n)" in render_markdown(agg)


def test_duplicated_attempts_are_counted_and_noted(make_row: RowFactory) -> None:
    agg = aggregate([make_row(A, rep=0), make_row(A, rep=0)])
    assert agg.arms[0].overall.duplicates == 1 and agg.arms[0].overall.attempts == 2
    assert any("repeat an earlier (uid, repetition)" in note for note in agg.notes)


def test_plain_tb_rows(tb_rows_file: Path) -> None:
    rows = read_campaign_results([tb_rows_file])
    agg = aggregate(rows)
    (arm,) = agg.arms
    s = arm.overall
    assert (arm.arm, arm.label, s.attempts, s.tasks, s.passes) == ("tb", "tb", 3, 2, 1)
    assert not s.outcomes.known and s.outcomes.success_rate == s.pass1 == 1 / 3
    assert s.outcomes.wrong_commit_rate is None and s.approvals_per_attempt is None
    assert {x.signature: x.count for x in s.signatures} == {"tool_usage": 1, "incomplete_resolution": 1}
    assert [d.domain for d in arm.domains] == ["sandbox_external_retail"]
    assert s.passk.omitted is not None
    md = render_markdown(agg)
    assert "| tb | 3 | 33.3% (1) | n/a | n/a | n/a |" in md
    assert summary_line(agg) == "agg: rows 3 arms 1 pass@1 tb=33.3%"
    assert "no `off` arm: lift is not computed." in agg.notes and agg.lift == []


def _tb_row(*messages: BaseModel, finish: str = "done") -> DecodeResult:
    return DecodeResult.model_validate(
        {
            "uid": "x.py:test_x",
            "messages": [m.model_dump() for m in messages],
            "test_result": TestResult(result=False, reward=0.0).model_dump(),
            "finish_reason": finish,
        }
    )


def test_fallback_failure_signatures() -> None:
    call = ToolCall(name="get_order", arguments={}, id="1")
    errored = ToolCall(name="get_order", arguments={"order": 1}, id="2", metadata={"error": "bad arguments"})
    text = Text(role="assistant", content="Which order?")
    assert failure_signature(_tb_row(ParallelToolCall(tool_calls=[call, errored]))) == "tool_usage"
    assert failure_signature(_tb_row(errored)) == "tool_usage"
    unknown = ToolResponse(name="nope", content="Error: function 'nope' does not exist", id="1")
    assert failure_signature(_tb_row(unknown)) == "tool_usage"
    in_band = ToolResponse(
        name="get_order", content='{"error": "Order not found", "tool": "get_order"}', id="1"
    )
    assert failure_signature(_tb_row(in_band)) == "tool_usage"
    fine = ToolResponse(name="get_order", content='{"order_id": "W1", "note": "error: none"}', id="1")
    plain = ToolResponse(name="get_order", content="{not json", id="1")
    assert failure_signature(_tb_row(fine, plain, text)) == "unclassified"
    for finish in ("user_limit", "agent_limit", "no_user_llm"):
        assert failure_signature(_tb_row(fine, finish=finish)) == "incomplete_resolution"
    system = _tb_row(text).model_copy(update={"is_system_error": True})
    assert failure_signature(system) == "harness_error"
    passing = _tb_row(unknown).model_copy(update={"test_result": TestResult(result=True, reward=1.0)})
    assert failure_signature(passing) is None


def test_open_loop_counts_and_rates(make_row: RowFactory) -> None:
    cells = ["caught", "caught", "caught", "missed", "false_block", "clean_pass", "clean_pass", "clean_pass"]
    outcome = {
        "caught": "held",
        "missed": "wrong_commit",
        "false_block": "false_block",
        "clean_pass": "success",
    }
    rows = [
        make_row(f"t{i}.py:test", arm="guard", agent="replay", outcome=outcome[c], open_loop=c)
        for i, c in enumerate(cells)
    ]
    s = aggregate(rows).arms[0].overall
    assert s.open_loop is not None
    assert (s.open_loop.caught, s.open_loop.missed, s.open_loop.false_block, s.open_loop.clean_pass) == (
        3,
        1,
        1,
        3,
    )
    assert (s.open_loop.catch_rate, s.open_loop.false_block_rate) == (0.75, 0.25)
    assert (s.outcomes.false_block_knowable, s.outcomes.false_block_rate) == (8, 1 / 8)
    assert "Open loop" in render_markdown(aggregate(rows))


def test_cost_from_usage_and_prices(make_row: RowFactory) -> None:
    prices = PriceTable.model_validate({"default": {"input": 2.0, "cached_input": 0.5, "output": 8.0}})
    usage = [(1000, 200, 100)]  # (800 × 2 + 200 × 0.5 + 100 × 8) / 1e6 = $0.0025
    rows = [make_row(A, rep=r, outcome="success" if r < 2 else "wrong_commit", usage=usage) for r in range(4)]
    cost = aggregate(rows, prices).arms[0].overall.cost
    assert cost is not None and cost.total_usd == pytest.approx(0.01)
    assert cost.per_successful_attempt == pytest.approx(0.005)
    assert cost.per_dependable_task is None  # no task passed 4/4
    named = PriceTable.model_validate({"llm:test-model": {"input": 1.0, "output": 1.0}})
    cost = aggregate(rows[:2], named).arms[0].overall.cost
    assert cost is not None and cost.total_usd == pytest.approx(2 * 1100 / 1e6)  # cached at the input price
    assert cost.per_dependable_task == pytest.approx(2 * 1100 / 1e6)
    other = PriceTable.model_validate({"someone-else": {"input": 1.0, "output": 1.0}})
    agg = aggregate(rows, other)
    cost = agg.arms[0].overall.cost
    assert cost is not None and cost.total_usd is None and "llm:test-model" in (cost.note or "")
    assert any("no price for llm:test-model" in note for note in agg.notes)
    assert aggregate(rows).arms[0].overall.cost is None  # no price table: no cost figures
    oracle = [make_row(A, agent="oracle", rep=0)]
    oracle_cost = aggregate(oracle, other).arms[0].overall.cost
    assert oracle_cost is not None and oracle_cost.total_usd == 0.0  # no agent tokens


def test_price_files(tmp_path: Path) -> None:
    good = tmp_path / "prices.json"
    good.write_text(json.dumps({"default": {"input": 1.1, "output": 4.4}}))
    assert load_prices(good).root["default"].cached_input is None
    cases = {
        "negative.yaml": ("default: {input: 1, output: -4}\n", r"field default\.output: Input should be"),
        "typo.yaml": ("default: {input: 1, output: 4, outptu: 4}\n", r"field default\.outptu: Extra inputs"),
        "list.yaml": ("- 1\n", "must map"),
        "broken.yaml": ("default: {input: [1\n", "not YAML or JSON"),
    }
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(PriceError, match=expected) as err:
            load_prices(path)
        assert str(err.value).startswith(str(path))
    with pytest.raises(PriceError, match="cannot read"):
        load_prices(tmp_path / "missing.yaml")


def test_facts_that_do_not_validate_are_a_results_error(make_row: RowFactory) -> None:
    bad = make_row(A)
    bad.metadata["outcome"] = "maybe"
    with pytest.raises(ResultsError, match=r"field metadata\.outcome"):
        aggregate([bad])
    with pytest.raises(ValueError, match="no rows"):
        aggregate([])


def _labelled_rows(make_row: RowFactory) -> list[DecodeResult]:
    return [
        make_row(A, arm="off", agent="simulated:o4-mini"),
        make_row(A, arm="guard", agent="simulated:o4-mini", outcome="held", guard={"committed": False}),
        make_row(A, arm="oracle-ceiling", agent="simulated:o4-mini", upper_bound=True),
    ]


def _rendered_table(agg: Aggregate) -> str:
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(render_table(agg))
    return console.export_text()


def test_labels_appear_in_every_output(make_row: RowFactory) -> None:
    agg = aggregate(_labelled_rows(make_row))
    assert [a.label for a in agg.arms] == [
        "off (simulated)",
        "guard (simulated)",
        "oracle-ceiling (simulated, upper bound)",
    ]
    outputs = {"md": render_markdown(agg), "table": _rendered_table(agg), "json": to_json(agg)}
    for name, text in outputs.items():
        lines = [line for line in text.splitlines() if "oracle-ceiling" in line and name != "json"]
        assert all("upper bound" in line for line in lines), (name, lines)
        figure_lines = [
            line for line in text.splitlines() if "%" in line and ("off" in line or "guard" in line)
        ]
        assert all("simulated" in line for line in figure_lines), (name, figure_lines)
    data = json.loads(outputs["json"])
    assert [(a["simulated"], a["upper_bound"]) for a in data["arms"]] == [
        (True, False),
        (True, False),
        (True, True),
    ]
    assert all("simulated" in x["label"] for x in data["lift"])
    line = summary_line(agg)
    assert line == (
        "agg: rows 3 arms 3 pass@1 off=100.0% (simulated) guard=0.0% (simulated) "
        "oracle-ceiling=100.0% (simulated, upper bound)"
    )


def test_several_agents_are_separate_groups(make_row: RowFactory) -> None:
    rows = [make_row(A, agent="llm:a"), make_row(A, agent="llm:b", outcome="wrong_commit")]
    rows += [make_row(A, arm="guard", agent="llm:a")]
    agg = aggregate(rows)
    assert [a.label for a in agg.arms] == ["llm:a/off", "llm:a/guard", "llm:b/off"]
    assert [(x.agent, x.arm, x.pairs) for x in agg.lift] == [("llm:a", "guard", 1)]


def test_json_is_stable_and_complete(make_row: RowFactory) -> None:
    rows = _campaign(make_row)
    text = to_json(aggregate(rows))
    assert text == to_json(aggregate(list(reversed(rows))))
    data = json.loads(text)
    assert list(data) == ["rows", "priced", "arms", "lift", "notes", "simulated"]
    assert list(data["arms"][0]) == [
        "arm",
        "agent",
        "name",
        "label",
        "upper_bound",
        "simulated",
        "overall",
        "domains",
    ]
    assert list(data["arms"][0]["overall"]["passk"]) == [
        "n",
        "omitted",
        "pass_at_k",
        "pass_power_k",
        "pass_hat_k",
        "observed_k_of_k",
    ]
    assert Aggregate.model_validate(data) == aggregate(rows)


def _with_parameters(row: DecodeResult, held: float = 0.5) -> DecodeResult:
    row.metadata["simulated"] = {
        "profile": "kimi-k3",
        "propensity": 0.25,
        "intent": "success",
        "reactions": [],
        "feedback": {"raw_error": 0.0, "held": held},
        "environment_share": 0.2,
    }
    return row


def test_simulated_parameters_title_every_output(make_row: RowFactory) -> None:
    rows = [_with_parameters(r) for r in _labelled_rows(make_row)]
    agg = aggregate(rows)
    params = "kimi-k3: feedback raw_error=0 held=0.5; environment_share=0.2"
    assert agg.simulated == [params]
    md = render_markdown(agg)
    titles = [line for line in md.splitlines() if line.startswith("## ") and line != "## Notes"]
    assert titles and all(t.endswith(f" — simulated: {params}") for t in titles)
    assert f"**Simulated**, not measured; parameters: {params}." in md
    assert f"simulated, not measured; parameters: {params}" in _rendered_table(agg)
    assert summary_line(agg).endswith(f" (simulated: {params})")
    assert json.loads(to_json(agg))["simulated"] == [params]
    mixed = aggregate([*rows, _with_parameters(make_row(B, arm="off", agent="simulated:o4-mini"), 1.0)])
    assert len(mixed.simulated) == 2 and " | " in render_markdown(mixed).splitlines()[2]


def test_simulated_parameters_are_validated(make_row: RowFactory) -> None:
    bad = _with_parameters(make_row(A, agent="simulated:o4-mini"))
    bad.metadata["simulated"]["feedback"]["held"] = 1.5
    with pytest.raises(ResultsError, match=r"field metadata\.simulated\.feedback\.held"):
        aggregate([bad])
    bare = make_row(A, agent="simulated:o4-mini")
    assert "state no parameters" in " ".join(aggregate([bare]).notes)
