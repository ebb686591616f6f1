"""``shadowguard env openenv`` as a subprocess, driven by the ``openenv`` client classes over the real
WebSocket: a ThinkingBox-style loop, guard outcomes in observations, 32 concurrent isolated episodes,
a dropped socket rolled back, bad input answered with ``error`` observations."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmark.openenv_env.client import ThinkingBoxEnv
from benchmark.procs import startup_timeout_s
from benchmark.tasks import Task, resolve_data

ROOT = Path(__file__).resolve().parents[2]
ST002 = "sandbox_external_retail_group1.py:test_case_ST002_001"
DELETE = {"name": "zendesk_delete_item", "arguments": {"table": "users", "id": "10003"}}


@dataclass
class Server:
    url: str
    http: str
    proc: subprocess.Popen[str]
    lines: list[str]
    tasks: dict[str, Task]

    def log(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    cmd = [sys.executable, "-c", "from proxy.cli import main; main()", "env", "openenv", "--port", "0"]
    cmd += ["--max-episodes", "40"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    )
    assert proc.stderr is not None
    lines: list[str] = []
    port: list[int] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            found = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/ws", line)
            if found:
                port.append(int(found.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        tasks = {t.id: t for t in resolve_data().tasks()}  # while the server starts
        ready.wait(startup_timeout_s())
        assert port, f"server did not start: {''.join(lines)}"
        srv = Server(f"ws://127.0.0.1:{port[0]}", f"http://127.0.0.1:{port[0]}", proc, lines, tasks)
        for _ in range(100):
            try:
                if httpx.get(srv.http + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield srv
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stderr.close()


@pytest.fixture(scope="module")
def tasks(server: Server) -> dict[str, Task]:
    return server.tasks


def golden(task: Task) -> list[dict[str, Any]]:
    return [{"name": c.tool, "arguments": c.parameters} for c in task.answer.golden_tool_interactions]


async def thinkingbox_loop(url: str, uid: str, calls: list[dict[str, Any]], arm: str) -> Any:
    """A loop as written for ThinkingBox's OpenEnv client: reset, list tools, call, submit <DONE>."""
    async with ThinkingBoxEnv(base_url=url) as env:
        result = await env.reset(test_uid=uid, arm=arm)
        assert result.observation.kind == "reset" and result.observation.user_message
        tools = (await env.list_tools()).observation.tools
        assert tools and all({"name", "description", "input_schema"} <= set(t) for t in tools)
        seen = []
        for i, call in enumerate(calls):
            result = await env.call_tool(call["name"], call["arguments"], call_id=f"call_{i}")
            assert result.observation.kind == "tool" and result.observation.call_id == f"call_{i}"
            assert not result.done and result.reward is None
            seen.append(result.observation)
        final = await env.submit_message("Your request is handled. <DONE>")
        return final, seen


def test_ready_and_the_thinkingbox_loop_in_both_arms(server: Server, tasks: dict[str, Task]) -> None:
    body = httpx.get(server.http + "/ready").json()
    assert body["ready"] is True and body["tasks"] == 507 and body["default_arm"] == "guard"
    for arm in ("guard", "off"):
        final, seen = asyncio.run(thinkingbox_loop(server.url, ST002, golden(tasks[ST002]), arm))
        assert final.done and final.reward == 1.0, final.observation.test_summary
        obs = final.observation
        assert (obs.kind, obs.reward_type, obs.finish_reason, obs.arm) == ("terminal", "pass", "done", arm)
        assert obs.steps_taken == len(seen) + 2
        assert all(o.tool_error is None for o in seen)
        if arm == "guard":
            assert obs.test_summary["guard"]["verdicts"] == {"allowed": len(seen)}
            assert obs.test_summary["guard"]["committed"] is True
        else:
            assert "guard" not in obs.test_summary and all(o.guard is None for o in seen)


def test_sync_client_call_tools_batch(server: Server, tasks: dict[str, Task]) -> None:
    with ThinkingBoxEnv(base_url=server.url).sync() as env:
        env.reset(test_uid=ST002, arm="off")
        batch = env.call_tools([{**c, "call_id": f"b{i}"} for i, c in enumerate(golden(tasks[ST002]))])
        assert batch.observation.kind == "tool_batch"
        assert [r.call_id for r in batch.observation.results] == ["b0", "b1"]
        missing = env.call_tool("no_such_tool", {})
        assert (missing.observation.tool_error, missing.observation.tool_result) == (
            "tool_not_found",
            "Unknown tool: no_such_tool",
        )
        bad_args = env.call_tool("get_order", {"order_id": 5, "bogus": 1})
        assert bad_args.observation.tool_error == "invalid_args"
        final = env.finish("done")
        assert final.reward == 1.0 and final.observation.finish_reason == "done"


def _fault(task: Task, family: str) -> list[dict[str, Any]]:
    """Two mutations of ST002's golden calls as ``bench faults`` makes them (families extra_write and
    bad_argument)."""
    create, update = golden(task)
    if family == "extra_write":  # the create repeated for another assignee
        item = {**create["arguments"]["item"], "assignee_id": "5"}
        return [create, {"name": create["name"], "arguments": {**create["arguments"], "item": item}}, update]
    item = {**create["arguments"]["item"], "assignee_id": {"value": "2"}}
    return [{"name": create["name"], "arguments": {**create["arguments"], "item": item}}, update]


def test_fault_off_fails_guard_answers_with_its_hint(server: Server, tasks: dict[str, Task]) -> None:
    """extra_write: off commits the stray ticket (reward 0); guard rolls the call back with its hint
    and commits the rest (reward 1). bad_argument: guard refuses the call as invalid arguments."""
    calls = _fault(tasks[ST002], "extra_write")
    off, _ = asyncio.run(thinkingbox_loop(server.url, ST002, calls, "off"))
    assert off.reward == 0.0 and off.observation.reward_type == "fail"
    assert off.observation.test_summary["db"] == "fail"
    guard, seen = asyncio.run(thinkingbox_loop(server.url, ST002, calls, "guard"))
    stopped = seen[1]
    assert stopped.kind == "tool" and stopped.tool_error == "execution_error" and not stopped.done
    assert stopped.guard is not None and stopped.guard["verdict"] == "rolled_back"
    assert stopped.guard["rules"] == ["retail.tickets.assignee_is_agent"]
    assert stopped.guard["hint"] == stopped.tool_result
    assert 'assigned to agent "2"' in stopped.tool_result
    assert guard.reward == 1.0 and guard.observation.reward_type == "pass"
    summary = guard.observation.test_summary["guard"]
    assert (
        summary["first_intervention"] == "zendesk_create_item: rolled_back (retail.tickets.assignee_is_agent)"
    )
    assert summary["verdicts"] == {"allowed": 2, "rolled_back": 1} and summary["intervened"] is True

    bad, seen = asyncio.run(
        thinkingbox_loop(server.url, ST002, _fault(tasks[ST002], "bad_argument"), "guard")
    )
    refused = seen[0]
    assert refused.tool_error == "invalid_args" and refused.guard is not None
    assert (refused.guard["verdict"], refused.guard["error_class"]) == ("refused", "invalid_arguments")
    assert "item.assignee_id: wrong type" in refused.tool_result
    assert bad.reward == 0.0


def test_off_surface_delete_is_refused(server: Server, tasks: dict[str, Task]) -> None:
    guard, seen = asyncio.run(thinkingbox_loop(server.url, ST002, [*golden(tasks[ST002]), DELETE], "guard"))
    assert seen[-1].guard is not None and seen[-1].guard["rules"] == ["tool_not_allowed"]
    assert guard.reward == 1.0


async def _episode(url: str, task: Task, arm: str) -> tuple[str, float | None]:
    async with ThinkingBoxEnv(base_url=url) as env:
        await env.reset(test_uid=task.id, arm=arm)
        for i, call in enumerate(golden(task)):
            await env.call_tool(call["name"], call["arguments"], call_id=str(i))
            await asyncio.sleep(0)
        result = await env.finish()
        return task.id, result.reward


def test_32_concurrent_episodes_isolated(server: Server, tasks: dict[str, Task]) -> None:
    """16 writing tasks, each run twice at once (a shared state would see the twin's writes and fail
    its hash), half guarded: all 32 rewards are 1.0."""
    writing = [t for t in tasks.values() if len(t.answer.golden_tool_interactions) >= 2][::25][:16]
    assert len(writing) == 16

    async def run_all() -> list[tuple[str, float | None]]:
        jobs = [_episode(server.url, t, arm) for t in writing for arm in ("guard", "off")]
        return await asyncio.gather(*jobs)

    rewards = asyncio.run(run_all())
    assert len(rewards) == 32 and all(r == 1.0 for _, r in rewards), rewards


def test_dropped_socket_is_rolled_back(server: Server, tasks: dict[str, Task]) -> None:
    task = tasks[ST002]

    async def drop() -> None:
        env = ThinkingBoxEnv(base_url=server.url)
        await env.connect()
        await env.reset(test_uid=ST002, arm="off", episode_id="dropped-episode")
        for call in golden(task):
            await env.call_tool(call["name"], call["arguments"])
        assert env._ws is not None
        env._ws.transport.abort()  # the socket drops: no close frame

    asyncio.run(drop())
    for _ in range(100):
        if "dropped-episode" in server.log():
            break
        time.sleep(0.1)
    assert re.search(
        r"dropped-episode .*abandoned by its client: rolled back, 2 call\(s\) discarded", server.log()
    )
    assert httpx.get(server.http + "/ready").json()["active_episodes"] == 0

    async def fresh() -> Any:
        async with ThinkingBoxEnv(base_url=server.url) as env:
            await env.reset(test_uid=ST002, arm="off")
            return await env.finish()

    untouched = asyncio.run(fresh())
    assert task.answer.expected is not None
    assert task.answer.expected.init_db_hash in untouched.observation.test_summary["db_detail"]


def test_bad_input_gets_error_observations_and_the_server_keeps_serving(
    server: Server, tasks: dict[str, Task]
) -> None:
    async def bad() -> list[Any]:
        async with ThinkingBoxEnv(base_url=server.url) as env:
            out = [await env.reset(test_uid="nope.py:test_x")]
            out.append(await env.call_tool("get_order", {}))
            out.append(await env.reset(test_uid=ST002, arm="oracle-ceiling"))
            await env.reset(test_uid=ST002)
            out.append(await env.step({"type": "call_tool"}))
            out.append(await env.step({"type": "jump"}))
            out.append(await env.step({"type": "call_tool", "name": "get_order", "arguments": "x"}))
            out.append(await env.call_tool("__reserved__init", {"config": {}}))
            out.append(await env.call_tools([{"name": "get_order"}, {"name": "_finish"}]))
            out.append(await env.finish("because"))
            final = await env.submit_message("I looked into it.")  # no user simulator: no_user_llm
            out.append(await env.call_tool("get_order", {"order_id": "ORD-70020"}))
            state = await env.state()
            return [*out, final, state]

    *errors, final, state = asyncio.run(bad())
    assert all(e.observation.kind == "error" and not e.done for e in errors)
    messages = [e.observation.error for e in errors]
    expected = [
        "unknown test uid 'nope.py:test_x'",
        "no active episode",
        "unknown arm 'oracle-ceiling'",
        "malformed action: call_tool.name: Field required",
        "malformed action: Input tag 'jump'",
        "malformed action: call_tool.arguments: Input should be a valid dictionary",
        "reserved tool name(s) '__reserved__init'",
        "reserved tool name(s) '_finish'",
        "unknown finish reason 'because'",
        "the episode is over (no_user_llm)",
    ]
    for message, want in zip(messages, expected, strict=True):
        assert message is not None and want in message, (message, want)
    assert final.done and final.reward == 0.0 and final.observation.finish_reason == "no_user_llm"
    assert (state.status, state.finish_reason) == ("done", "no_user_llm")
    again, _ = asyncio.run(thinkingbox_loop(server.url, ST002, golden(tasks[ST002]), "guard"))
    assert again.reward == 1.0


def test_rubric_task_without_judge_never_passes(server: Server, tasks: dict[str, Task]) -> None:
    task = next(t for t in tasks.values() if t.rubrics_yesno)
    final, _ = asyncio.run(thinkingbox_loop(server.url, task.id, golden(task), "off"))
    summary = final.observation.test_summary
    assert summary["db"] == "pass" and summary["rubrics"] == "rubric not graded: no judge configured"
    assert final.reward == 0.0 and final.observation.reward_type == "fail"
    assert json.dumps(summary)
