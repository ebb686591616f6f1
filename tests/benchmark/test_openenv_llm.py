"""``shadowguard env openenv --llm-config`` end to end: the OpenEnv server and ``bench stub-llm`` (the
scripted test double) as subprocesses, driven by the OpenEnv client over the real WebSocket. A
message that needs a user reply gets the LLM user's; a rubric task is graded by the LLM judge (pass
with the judge saying Yes, fail with ``judge-no``); an endpoint outage is a ``system_error``."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from benchmark.openenv_env.client import ThinkingBoxEnv
from benchmark.openenv_env.llm_hooks import as_messages
from benchmark.procs import ServerProcess, startup_timeout_s
from benchmark.tasks import Task, resolve_data

ROOT = Path(__file__).resolve().parents[2]
BOOKING = "external_booking_v1"
KEY_ENV = "SHADOWGUARD_TEST_OPENENV_LLM_KEY"
SHADOWGUARD = str(Path(sys.executable).parent / "shadowguard")


class Stub:
    def __init__(self, url: str) -> None:
        self.url = url

    def outage(self, status: int | None, count: int | None = None) -> None:
        base = self.url.rsplit("/v1", 1)[0]
        response = httpx.post(f"{base}/stub/outage", json={"status": status, "count": count}, timeout=10)
        assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    os.environ[KEY_ENV] = "sk-test-" + secrets.token_hex(16)
    args = [SHADOWGUARD, "bench", "stub-llm", "--port", "0", "--api-key-env", KEY_ENV, "--domain", BOOKING]
    log = tmp_path_factory.mktemp("stub") / "stub.log"
    server = ServerProcess(args, log, "stub-llm (scripted test double): listening on", name="stub-llm")
    try:
        yield Stub(server.wait_url())
    finally:
        server.stop()
        os.environ.pop(KEY_ENV, None)


def llm_config(path: Path, stub: Stub, judge_model: str) -> Path:
    endpoint: dict[str, Any] = {"base_url": stub.url, "model": "stub-llm", "api_key_env": KEY_ENV}
    endpoint |= {"retries": 1, "backoff_max_s": 0.05, "timeout_s": 30}
    raw = {"endpoint": endpoint, "judge": {"model": judge_model}, "max_user_turns": 3}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


class OpenEnvServer:
    """``shadowguard env openenv --llm-config FILE --domain external_booking_v1`` on a free port."""

    def __init__(self, config: Path) -> None:
        args = [
            SHADOWGUARD,
            "env",
            "openenv",
            "--port",
            "0",
            "--domain",
            BOOKING,
            "--llm-config",
            str(config),
        ]
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.url = ""
        found = threading.Event()

        def pump() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                match = re.search(r"listening on (ws://127\.0\.0\.1:\d+)/ws", line)
                if match:
                    self.url = match.group(1)
                    found.set()
            found.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        found.wait(startup_timeout_s())
        assert self.url, f"the server did not start: {''.join(self.lines)}"

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._pump.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def server(stub: Stub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenEnvServer]:
    srv = OpenEnvServer(llm_config(tmp_path_factory.mktemp("cfg") / "llm.yaml", stub, "stub-llm"))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {t.id: t for t in resolve_data().tasks([BOOKING])}


def rubric_task(tasks: dict[str, Task]) -> Task:
    return next(t for t in tasks.values() if t.rubrics_yesno)


async def episode(url: str, task: Task, ask_first: bool, arm: str = "guard") -> tuple[Any, list[Any]]:
    """Optionally ask the user first, replay the golden calls, end with ``<DONE>``."""
    async with ThinkingBoxEnv(base_url=url) as env:
        await env.reset(test_uid=task.id, arm=arm)
        seen = []
        if ask_first:
            seen.append(await env.submit_message("Before I start: may I go ahead with your request?"))
        for i, call in enumerate(task.answer.golden_tool_interactions):
            result = await env.call_tool(call.tool, call.parameters, call_id=f"c{i}")
            assert result.observation.kind == "tool", result.observation.error
        final = await env.submit_message("Your booking is handled. <DONE>")
        return final, seen


def test_ready_names_the_endpoints(server: OpenEnvServer, stub: Stub) -> None:
    body = httpx.get(server.url.replace("ws://", "http://") + "/ready", timeout=10).json()
    assert (body["user_simulator"], body["judge"]) == (True, True)
    assert body["llm_endpoints"] == {
        "user": {"base_url": stub.url, "model": "stub-llm"},
        "judge": {"base_url": stub.url, "model": "stub-llm"},
    }
    assert os.environ[KEY_ENV] not in str(body)


def test_user_reply_then_rubric_pass(server: OpenEnvServer, tasks: dict[str, Task]) -> None:
    task = rubric_task(tasks)
    final, (asked,) = asyncio.run(episode(server.url, task, ask_first=True))
    assert (asked.observation.kind, asked.done) == ("user", False)
    assert asked.observation.user_message == "Yes, please go ahead. [stub-llm test double]"
    obs = final.observation
    assert (final.reward, obs.reward_type, obs.finish_reason) == (1.0, "pass", "done"), obs.test_summary
    summary = obs.test_summary
    assert summary["db"] == "pass" and summary["rubrics"] == "pass"
    assert [a["question"] for a in summary["rubric_answers"]] == task.rubrics_yesno
    assert all(a["yes"] for a in summary["rubric_answers"])


def test_user_limit_from_the_config(server: OpenEnvServer, tasks: dict[str, Task]) -> None:
    async def chatty() -> list[Any]:
        async with ThinkingBoxEnv(base_url=server.url) as env:
            await env.reset(test_uid=rubric_task(tasks).id, arm="off")
            return [await env.submit_message(f"Question {i}?") for i in range(4)]

    *turns, last = asyncio.run(chatty())
    assert [t.observation.kind for t in turns] == ["user"] * 3
    assert (last.observation.finish_reason, last.reward) == ("user_limit", 0.0)


def test_endpoint_outage_is_a_system_error(server: OpenEnvServer, stub: Stub, tasks: dict[str, Task]) -> None:
    task = rubric_task(tasks)

    async def ask(env: ThinkingBoxEnv) -> Any:
        await env.reset(test_uid=task.id, arm="guard")
        return await env.submit_message("May I go ahead?")

    async def during_outage() -> tuple[Any, Any]:
        async with ThinkingBoxEnv(base_url=server.url) as env:
            user_down = await ask(env)
            await env.reset(test_uid=task.id, arm="off")
            for call in task.answer.golden_tool_interactions:
                await env.call_tool(call.tool, call.parameters)
            judge_down = await env.submit_message("Done. <DONE>")
            return user_down, judge_down

    stub.outage(503)
    try:
        user_down, judge_down = asyncio.run(during_outage())
    finally:
        stub.outage(None)
    for result, role in ((user_down, "user"), (judge_down, "judge")):
        obs = result.observation
        assert (obs.kind, result.done, result.reward, obs.reward_type) == (
            "terminal",
            True,
            0.0,
            "system_error",
        )
        assert obs.finish_reason == "system_error"
        assert obs.error is not None and obs.error.startswith(f"EndpointError: {role} endpoint")
        assert "HTTP 503" in obs.error
    final, _ = asyncio.run(episode(server.url, task, ask_first=True))
    assert final.reward == 1.0  # the endpoint is back: the next episode is graded


def test_judge_no_fails_the_rubric_task(stub: Stub, tasks: dict[str, Task], tmp_path: Path) -> None:
    srv = OpenEnvServer(llm_config(tmp_path / "llm.yaml", stub, "stub-llm:judge-no"))
    try:
        final, _ = asyncio.run(episode(srv.url, rubric_task(tasks), ask_first=False, arm="off"))
    finally:
        srv.stop()
    obs = final.observation
    assert (final.reward, obs.reward_type) == (0.0, "fail")
    assert obs.test_summary["db"] == "pass" and obs.test_summary["rubrics"] == "fail"
    assert not any(a["yes"] for a in obs.test_summary["rubric_answers"])


def test_bad_llm_config_is_refused_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "llm.yaml"
    bad.write_text("endpoint: {base_url: nope, model: m}\n", encoding="utf-8")
    unset = tmp_path / "unset.yaml"
    unset.write_text(
        "endpoint: {base_url: 'http://127.0.0.1:9/v1', model: m, api_key_env: SHADOWGUARD_UNSET_KEY_X}\n",
        encoding="utf-8",
    )
    both = tmp_path / "both.yaml"
    both.write_text("endpoint: {base_url: 'http://127.0.0.1:9/v1', model: m}\n", encoding="utf-8")
    needs_args = ["--user-sim", "benchmark.openenv_env.llm_hooks:LlmUser"]
    cases = [
        (["--llm-config", str(bad)], "field agent.base_url: String should match pattern"),
        (["--llm-config", str(unset)], "SHADOWGUARD_UNSET_KEY_X"),
        (["--judge", "benchmark.openenv_env.llm_hooks:LlmJudge", "--llm-config", str(both)], "both set one"),
        (needs_args, "cannot be made without arguments"),
    ]
    for extra, want in cases:
        run = subprocess.run(
            [SHADOWGUARD, "env", "openenv", "--port", "0", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert run.returncode == 2 and want in " ".join(run.stderr.split()), run.stderr


def test_transcript_as_messages() -> None:
    messages = as_messages(
        [
            {"role": "user", "content": "Book it"},
            {"role": "assistant", "tool_calls": [{"name": "find", "arguments": {"q": 1}, "id": None}]},
            {"role": "tool", "name": "find", "id": None, "content": "found"},
            {"role": "assistant", "content": "May I?"},
        ]
    )
    assert [m.T for m in messages] == ["Text", "ToolCall", "ToolResponse", "Text"]
    assert messages[1].id == messages[2].id == "call_1"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unknown role 'system'"):
        as_messages([{"role": "system", "content": "x"}])
