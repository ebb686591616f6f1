"""``bench run --agent llm`` end to end against the scripted endpoint (a subprocess): the loop, user turns,
``<DONE>``, limits, rubric judging, usage, resume after an outage, no API key in any output, and the
calls through a real ``shadowguard serve`` in both protocol eras."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmark.campaign.arms import ARMS
from benchmark.campaign.results import DecodeResult, Text, ToolResponse, passed
from benchmark.campaign.runner import CampaignConfig, UnitKey, Worker
from benchmark.llm.agent import LlmAgent
from benchmark.llm.config import load_llm_config

from .conftest import Stub, raw_rows, rows_of, run_campaign

SAMPLE = (  # one task per domain whose first golden write has a required argument (the stub's fault)
    "external_booking_v1_group1.py:test_bmd_001",
    "sandbox_auto_insurance_group1.py:test_bil_001",
    "sandbox_consulting_group1.py:test_csa_001",
    "sandbox_external_retail_group1.py:test_case_ST002_001",
    "sandbox_neobank_support_v1_group1.py:test_dc_001",
)
RETAIL = "sandbox_external_retail"
ST002 = "sandbox_external_retail_group1.py:test_case_ST002_001"
RUBRIC = "sandbox_neobank_support_v1_group1_rubrics_yesno.py:test_aa_001"
CANCEL = "sandbox_external_retail_group1.py:test_case_ST025_001"  # its golden calls cancel_order
PROXY_ARMS = tuple(name for name, arm in ARMS.items() if not arm.oracle)


def _tasks_file(tmp_path: Path, uids: tuple[str, ...]) -> str:
    path = tmp_path / "tasks.txt"
    path.write_text("\n".join(uids) + "\n")
    return str(path)


def _by_arm(rows: list[DecodeResult]) -> dict[str, list[DecodeResult]]:
    out: dict[str, list[DecodeResult]] = {}
    for row in rows:
        out.setdefault(str(row.metadata["arm"]), []).append(row)
    return out


def test_every_arm_in_process_and_the_guard_hint_reaches_the_model(tmp_path: Path, stub: Stub) -> None:
    """All arms but oracle-ceiling, one task per domain, correct-on-hint asking the user first: each arm
    gives a graded row per task (no system error); an arm whose refusal carries the guard's hint for the
    stub's fault (validation, guard) passes every task and off passes fewer: the guard's refusal text is
    read and the call fixed. User turns, <DONE>, usage per role; the key is nowhere in the output."""
    out = tmp_path / "llm.jsonl"
    config = stub.config(tmp_path / "llm.yaml", endpoint={**_endpoint(stub), "model": "stub-llm:ask-first"})
    names = [name for name in ARMS if not ARMS[name].oracle]
    result = run_campaign(
        "--llm-config",
        str(config),
        "--arms",
        ",".join(names),
        "--out",
        str(out),
        "--tasks",
        _tasks_file(tmp_path, SAMPLE),
    )
    assert result.exit_code == 0, result.output
    arms = _by_arm(rows_of(out))
    assert sorted(arms) == sorted(names)
    for name, rows in arms.items():
        assert len(rows) == len(SAMPLE), name
        assert not any(r.is_system_error for r in rows), name
    score = {name: sum(passed(r) for r in rows) for name, rows in arms.items()}
    assert score["guard"] == score["validation"] == len(SAMPLE), score
    assert score["off"] < score["guard"], score
    for row in arms["guard"]:
        assert row.finish_reason == "done"
        texts = [m for m in row.messages if isinstance(m, Text)]
        assert texts[-1].content.endswith("<DONE>") and "[stub-llm test double]" in texts[-1].content
        assert any(m.metadata.get("is_user_llm") for m in texts), "the simulated user answered the question"
        assert any("What to do:" in m.content for m in row.messages if isinstance(m, ToolResponse))
        assert row.metadata["guard"]["intervened"] is True
        llm = row.metadata["llm"]
        assert llm["served_model"] == "stub-llm (scripted test double)"
        assert set(llm["usage"]) == {"agent", "user"} and llm["usage"]["user"]["calls"] == 1
        assert {getattr(u, "role", None) for u in row.usage} == {"agent"}  # as tb infer: agent calls
        assert len(row.usage) == llm["usage"]["agent"]["calls"]
    meta = out.with_name(out.stem + "_run_metadata.yaml").read_text()
    assert "api_key_env: SHADOWGUARD_TEST_LLM_KEY" in meta and "stub-llm (scripted test double)" in meta
    for path in (out, out.with_name(out.stem + "_run_metadata.yaml")):
        assert stub.key not in path.read_text()
    assert stub.key not in result.output


def _endpoint(stub: Stub) -> dict[str, Any]:
    return {
        "base_url": stub.url,
        "model": "stub-llm",
        "api_key_env": "SHADOWGUARD_TEST_LLM_KEY",
        "retries": 1,
        "backoff_max_s": 0.05,
    }


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, stub: Stub) -> Any:
    path = stub.config(tmp_path_factory.mktemp("llm") / "llm.yaml")
    config = CampaignConfig(
        agent="llm",
        arms=("off", "guard"),
        domains=(RETAIL, "sandbox_neobank_support_v1"),
        llm_config=str(path),
    )
    worker = Worker(config)
    yield worker
    worker.close()


def _attempt(worker: Worker, stub: Stub, uid: str, arm: str, **changes: Any) -> DecodeResult:
    """One attempt with the worker's agent re-made from a config with ``changes``."""
    raw = {"endpoint": _endpoint(stub)} | changes
    path = Path(worker.config.llm_config or "")
    stub.config(path, **raw)
    agent = worker.agent
    assert isinstance(agent, LlmAgent)
    worker.agent = LlmAgent(load_llm_config(path), agent._tasks, Path(_think(worker)))
    (summary,) = worker.run_unit(UnitKey(uid, None, 0), [arm])
    return DecodeResult.model_validate_json(summary.line)


def _think(worker: Worker) -> Path:
    from benchmark.campaign.runner import _dataset_root

    return _dataset_root(worker.bench) / "agent" / "think.yaml"


def test_limits_unknown_tools_and_no_user(worker: Worker, stub: Stub) -> None:
    ep = _endpoint(stub)
    chatty = _attempt(
        worker, stub, ST002, "off", endpoint=ep | {"model": "stub-llm:never-done"}, max_user_turns=2
    )
    assert chatty.finish_reason == "user_limit" and not passed(chatty)
    assert sum(1 for m in chatty.messages if isinstance(m, Text) and m.metadata.get("is_user_llm")) == 2

    looping = _attempt(
        worker, stub, ST002, "guard", endpoint=ep | {"model": "stub-llm:loop"}, max_agent_actions=3
    )
    assert looping.finish_reason == "agent_limit"
    assert sum(1 for m in looping.messages if m.T == "ParallelToolCall") == 3

    unknown = _attempt(worker, stub, ST002, "off", endpoint=ep | {"model": "stub-llm:unknown-tool"})
    answers = [m.content for m in unknown.messages if isinstance(m, ToolResponse)]
    assert answers[0] == "Error: function 'no_such_tool_stub' does not exist"
    assert unknown.finish_reason == "done" and passed(unknown)  # then the golden calls

    mute = _attempt(worker, stub, ST002, "off", endpoint=ep | {"model": "stub-llm:never-done"}, user="none")
    assert mute.finish_reason == "no_user_llm"


def test_rubric_tasks_are_judged_only_with_a_judge(worker: Worker, stub: Stub) -> None:
    ep = _endpoint(stub) | {"model": "stub-llm:golden"}
    yes = _attempt(worker, stub, RUBRIC, "off", endpoint=ep)
    assert passed(yes) and yes.metadata["judge"]["rubrics"] == "pass"
    assert (
        all(a["yes"] for a in yes.metadata["judge"]["answers"])
        and yes.metadata["llm"]["usage"]["judge"]["calls"]
    )

    no = _attempt(
        worker, stub, RUBRIC, "off", endpoint=ep, judge=_endpoint(stub) | {"model": "stub-llm:judge-no"}
    )
    assert not passed(no) and no.metadata["judge"] == no.metadata["judge"] | {"db": "pass", "rubrics": "fail"}
    assert no.test_result is not None and "rubric" in no.test_result.tb

    ungraded = _attempt(worker, stub, RUBRIC, "off", endpoint=ep, judge="none")
    assert not passed(ungraded) and ungraded.metadata["judge"]["rubrics"].startswith("rubric not graded")


def test_endpoint_outage_is_a_system_error_and_resume_reruns_it(tmp_path: Path, stub: Stub) -> None:
    out = tmp_path / "outage.jsonl"
    config = stub.config(tmp_path / "llm.yaml")
    args = [
        "--llm-config",
        str(config),
        "--arms",
        "off",
        "--out",
        str(out),
        "--domain",
        RETAIL,
        "--tasks",
        ST002,
    ]
    stub.outage(503)
    try:
        first = run_campaign(*args)
    finally:
        stub.outage(None)
    assert first.exit_code == 0, first.output
    (row,) = raw_rows(out)
    assert row["is_system_error"] is True and row["metadata"]["error"]["type"] == "EndpointError"
    assert (
        "after 2 attempt(s)" in row["metadata"]["error"]["message"]
        and "HTTP 503" in row["metadata"]["error"]["message"]
    )
    again = run_campaign(*args, "--resume")
    assert again.exit_code == 0, again.output
    (row,) = raw_rows(out)
    assert row["is_system_error"] is False and row["finish_reason"] == "done"
    assert stub.key not in out.read_text()


PROXY_SAMPLE = {"2026-07-28": (ST002, CANCEL), "legacy": (ST002,)}
"""Retail tasks per era through the proxy, every arm but oracle-ceiling on each."""


def _in_era(worker: Worker, era: str) -> None:
    worker.config = CampaignConfig(**{**worker.config.__dict__, "proxy_era": era})
    stack = getattr(worker, "proxy_stack", None)
    if stack is not None:
        stack.era = era


@pytest.mark.parametrize("era", list(PROXY_SAMPLE))
def test_every_arm_through_the_proxy(proxy_worker: Worker, era: str) -> None:
    """off straight to the environment server, each lever arm through its own `shadowguard serve` whose
    pack is the arm's cut: correct-on-hint passes where the refusal carries the hint (validation,
    guard), off fails, and the hint the model reads is the proxy's rendering."""
    _in_era(proxy_worker, era)
    for uid in PROXY_SAMPLE[era]:
        summaries = proxy_worker.run_unit(UnitKey(uid, None, 0))
        rows = [DecodeResult.model_validate_json(s.line) for s in summaries]
        arms = {str(r.metadata["arm"]): r for r in rows}
        assert list(arms) == list(PROXY_ARMS)
        assert not any(r.is_system_error for r in rows), {a: r.metadata.get("error") for a, r in arms.items()}
        assert not passed(arms["off"]) and passed(arms["validation"]) and passed(arms["guard"]), uid
        for name, row in arms.items():
            path = "direct" if name == "off" else "shadowguard serve"
            assert row.metadata["llm"]["through_proxy"] == {"era": era, "path": path}
        guard = arms["guard"]
        refused = [
            m.content
            for m in guard.messages
            if isinstance(m, ToolResponse) and "Refused by the guard" in m.content
        ]
        assert refused and "What to do:" in refused[0]
        assert guard.metadata["guard"]["committed"] is True
        assert guard.metadata["guard"]["committed_changes"] > 0


def test_each_arms_proxy_serves_its_cut_pack(proxy_worker: Worker) -> None:
    """The tools an agent lists through each arm's proxy: the pack's surface only where the surface
    lever is on (the retail pack hides zendesk_delete_item); the proxy's commit tool everywhere."""
    from benchmark.llm.proxied import ProxyStack

    _in_era(proxy_worker, "2026-07-28")
    proxy_worker.run_unit(UnitKey(ST002, None, 0), ["surface", "checks"])
    stack = getattr(proxy_worker, "proxy_stack", None)
    assert isinstance(stack, ProxyStack)
    listed: dict[str, set[str]] = {}
    for name, proxy in stack.domain(RETAIL).proxies.items():
        with stack.connect(proxy.url) as client:
            listed[name] = {t.name for t in stack.portal.call(client.list_tools).tools}
    assert "commit" in listed["surface"] and "commit" in listed["checks"]
    assert "zendesk_delete_item" in listed["checks"] and "zendesk_delete_item" not in listed["surface"]
    assert listed["checks"] > listed["surface"]


def test_a_held_call_through_the_proxy_meets_the_reviewer(proxy_worker: Worker, stub: Stub) -> None:
    """guard's approvals lever holds cancel_order (irreversible): the campaign reviewer approves it
    through the proxy's approvals API, the call runs again under the approval and the commit makes it
    durable."""
    assert isinstance(proxy_worker.agent, LlmAgent)
    golden = load_llm_config(
        stub.config(
            Path(proxy_worker.config.llm_config or ""),
            endpoint=_endpoint(stub) | {"model": "stub-llm:golden"},
        )
    )
    agent = proxy_worker.agent
    proxy_worker.agent = LlmAgent(golden, agent._tasks, _think(proxy_worker))
    try:
        (summary,) = proxy_worker.run_unit(UnitKey(CANCEL, None, 0), ["guard"])
    finally:
        proxy_worker.agent = agent
    row = DecodeResult.model_validate_json(summary.line)
    assert passed(row), row.metadata
    approvals = row.metadata["guard"]["approvals"]
    assert approvals["requested"] >= 1 and approvals == approvals | {
        "approved": approvals["requested"],
        "rejected": 0,
    }


@pytest.fixture(scope="module")
def proxy_worker(tmp_path_factory: pytest.TempPathFactory, stub: Stub) -> Iterator[Worker]:
    """A worker whose calls go through the proxy, every arm but oracle-ceiling, the retail pack."""
    path = stub.config(tmp_path_factory.mktemp("llm-proxy") / "llm.yaml")
    config = CampaignConfig(
        agent="llm",
        arms=PROXY_ARMS,
        domains=(RETAIL,),
        llm_config=str(path),
        through_proxy=True,
    )
    worker = Worker(config)
    yield worker
    worker.close()
