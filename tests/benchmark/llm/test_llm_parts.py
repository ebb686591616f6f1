"""The parts of the real-LLM agent: its config, the endpoint client's retries, the user simulator's and
the judge's prompts and parsing (the client against the stub endpoint subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.campaign.results import Message, Text, ToolResponse
from benchmark.llm.client import ChatClient, EndpointError, UsageMeter
from benchmark.llm.config import Endpoint, LlmConfigError, load_llm_config
from benchmark.llm.judge import RubricJudge, final_response, parse_yes
from benchmark.llm.user import I_DONT_KNOW, UserSimulator, clean, conversation, sanitize
from benchmark.tasks import BenchData

from .conftest import KEY_ENV, Stub, run_campaign


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llm.yaml"
    path.write_text(text)
    return path


def test_one_endpoint_serves_every_role_unless_overridden(tmp_path: Path) -> None:
    config = load_llm_config(
        _write(
            tmp_path,
            "endpoint: {base_url: 'http://127.0.0.1:1/v1', model: m, api_key_env: SOME_KEY}\n"
            "user: {temperature: 0.3}\njudge: {max_tokens: 128}\nmax_agent_actions: 7\n",
        )
    )
    assert config.agent.model == config.user.model == config.judge.model == "m"  # type: ignore[union-attr]
    assert config.user is not None and config.user.temperature == 0.3 and config.agent.temperature == 0.0
    assert config.judge is not None and config.judge.max_tokens == 128
    assert config.max_agent_actions == 7 and config.max_user_turns == 10
    assert config.public()["agent"]["api_key_env"] == "SOME_KEY"
    off = load_llm_config(_write(tmp_path, "endpoint: {base_url: 'http://h/v1', model: m}\njudge: none\n"))
    assert off.judge is None and off.user is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("endpoint: {model: m}\n", "field agent.base_url: Field required"),
        ("endpoint: {base_url: 'http://h/v1', model: m, temprature: 1}\n", "field endpoint.temprature"),
        ("endpoint: {base_url: 'ftp://h', model: m}\n", "field agent.base_url: String should match"),
        ("endpoint: {base_url: 'http://h/v1', model: m}\nmax_user_turns: -1\n", "field max_user_turns"),
        ("- a list\n", "must be a mapping"),
        ("endpoint: {base_url: 'http://h/v1', model: m, api_key_env: 'sk-not-a-name'}\n", "api_key_env"),
    ],
)
def test_bad_configs_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(LlmConfigError, match=r"llm\.yaml") as caught:
        load_llm_config(_write(tmp_path, text))
    assert message in str(caught.value)


def test_a_missing_key_variable_is_named_and_never_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SG_NOT_SET_KEY", raising=False)
    endpoint = Endpoint(base_url="http://h/v1", model="m", api_key_env="SG_NOT_SET_KEY")
    with pytest.raises(LlmConfigError, match="SG_NOT_SET_KEY"):
        endpoint.api_key()
    assert Endpoint(base_url="http://h/v1", model="m").api_key() == "unused"


def _endpoint(stub: Stub, **changes: object) -> Endpoint:
    fields = {
        "base_url": stub.url,
        "model": "stub-llm",
        "api_key_env": KEY_ENV,
        "retries": 2,
        "backoff_max_s": 0.02,
    }
    return Endpoint.model_validate(fields | changes)


HELLO = [{"role": "system", "content": "You are an AI Agent."}, {"role": "user", "content": "hello"}]


def test_client_retries_5xx_and_429_then_gives_up_as_an_endpoint_error(stub: Stub) -> None:
    client = ChatClient(_endpoint(stub), "agent")
    meter = UsageMeter()
    try:
        stub.outage(503, count=2)  # two failures, the third attempt answers
        assert client.complete(HELLO, meter).choices[0].message.content
        stub.outage(429, count=3)  # one more failure than the budget
        with pytest.raises(EndpointError, match=r"after 3 attempt\(s\): HTTP 429"):
            client.complete(HELLO, meter)
    finally:
        stub.outage(None)
    assert [getattr(u, "role", None) for u in meter.calls] == ["agent"]
    assert meter.by_role()["agent"]["calls"] == 1 and meter.calls[0].input_tokens > 0


def test_a_refused_request_is_not_retried(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SG_WRONG_KEY", "sk-wrong")
    client = ChatClient(_endpoint(stub, api_key_env="SG_WRONG_KEY"), "judge")
    with pytest.raises(EndpointError, match=r"judge endpoint .* refused the request: HTTP 401") as caught:
        client.complete(HELLO, UsageMeter())
    assert "sk-wrong" not in str(caught.value)


def test_unreachable_endpoint_is_an_endpoint_error() -> None:
    client = ChatClient(
        Endpoint(base_url="http://127.0.0.1:9/v1", model="m", retries=1, backoff_max_s=0.01), "user"
    )
    with pytest.raises(EndpointError, match=r"user endpoint .* after 2 attempt\(s\): APIConnectionError"):
        client.complete(HELLO, UsageMeter())


def test_user_simulator_prompt_and_reply(stub: Stub, bench: BenchData) -> None:
    task = next(t for t in bench.tasks(["sandbox_external_retail"]) if t.user_context)
    transcript: list[Message] = [
        Text(role="system", content="policy"),
        Text(role="user", content=task.query),
        ToolResponse(name="t", content="secret tool text", id="1"),
        Text(role="assistant", content="What is your order number? <DONE>"),
    ]
    user = UserSimulator(ChatClient(_endpoint(stub), "user"))
    system, prompt = user.prompt(task, transcript)
    assert "I don't know" in system["content"] and "Never show your notes" in system["content"]
    assert task.user_context.splitlines()[0] in prompt["content"]
    assert "secret tool text" not in prompt["content"] and "policy" not in prompt["content"]
    assert "&lt;DONE&gt;" in prompt["content"] and "<DONE>" not in prompt["content"]
    meter = UsageMeter()
    assert user.reply(task, transcript, meter).startswith("Yes, please go ahead.")
    assert meter.by_role() == {"user": meter.by_role()["user"]} and meter.by_role()["user"]["calls"] == 1


def test_user_text_helpers() -> None:
    assert clean('User: "ORD-1"') == "ORD-1"
    assert clean("   ") == I_DONT_KNOW
    assert sanitize("</private_notes> now") == "&lt;/private_notes&gt; now"
    messages = [
        Text(role="user", content="hi"),
        Text(role="assistant", content="x", metadata={"tag": "think"}),
    ]
    assert conversation(messages) == "User: hi"


def test_judge_parsing_and_the_final_response(stub: Stub, bench: BenchData) -> None:
    assert parse_yes("Yes.") and parse_yes("The answer is: yes") and parse_yes("YES")
    assert not parse_yes("") and not parse_yes("No") and not parse_yes("I think Yes is right")
    messages = [Text(role="assistant", content="first"), Text(role="assistant", content="final <DONE>")]
    assert final_response(messages) == "final <DONE>"
    task = next(t for t in bench.tasks(["sandbox_neobank_support_v1"]) if t.rubrics_yesno)
    judge = RubricJudge(ChatClient(_endpoint(stub), "judge"))
    grade = judge.grade(task, "final <DONE>")
    assert grade.passed and len(grade.answers) == len(task.rubrics_yesno or [])
    no = RubricJudge(ChatClient(_endpoint(stub, model="stub-llm:judge-no"), "judge")).grade(task, "x")
    assert not no.passed and no.failed() == list(task.rubrics_yesno or [])
    plain = next(t for t in bench.tasks(["sandbox_neobank_support_v1"]) if not t.rubrics_yesno)
    with pytest.raises(ValueError, match="no yes/no rubrics"):
        judge.grade(plain, "x")


def test_bad_campaign_options_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = str(tmp_path / "out.jsonl")
    config = _write(
        tmp_path, "endpoint: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: SG_UNSET_KEY}\n"
    )
    monkeypatch.delenv("SG_UNSET_KEY", raising=False)
    cases = [
        ([], "--llm-config goes with --agent llm"),
        (
            ["--llm-config", str(config), "--through-proxy", "--arms", "off,checks,oracle-ceiling"],
            "--arms: --through-proxy cannot run oracle-ceiling: it reads the answer key",
        ),
        (["--llm-config", str(config), "--proxy-era", "1999"], "--proxy-era: unknown era"),
        (["--llm-config", str(config), "--domain", "sandbox_external_retail"], "SG_UNSET_KEY"),
    ]
    for args, message in cases:
        result = run_campaign("--out", out, *args)
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()), result.output
    assert not Path(out).exists()
