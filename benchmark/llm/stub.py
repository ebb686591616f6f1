"""``shadowguard bench stub-llm``: a scripted OpenAI-compatible server. A TEST DOUBLE, not a model.

It lets CI drive the whole real-LLM loop (agent, simulated user, rubric judge, both arms, in process
and through the proxy) with no model. Everything it says is labelled: the model it reports is
``stub-llm (scripted test double)``, every assistant text starts with ``[stub-llm test double]``, the
``system_fingerprint`` says so, and its token counts are a scripted estimate (characters / 4).

It plays the *agent* (it is on the agent's side of the trust boundary, so it may read the golden calls;
the guard never does). The task is found from the request alone: the domain from the tool names, the
task from the query (a query two tasks of a domain share is answered with an "ambiguous" final text).
Which call comes next is worked out from the conversation in the request, so the server keeps no
per-conversation state. Agent policies (``--policy``):

``golden``           the golden calls in order, then a final text ending ``<DONE>``.
``correct-on-hint``  the golden calls with one fault: the first golden write that has a required
                     argument is sent without it. When the tool result of that call carries a guard
                     hint (the guard's ``What to do:`` line), the call is sent again correctly; a raw
                     tool error is not understood, and the script moves on with the write missing.
``never-done``       asks the user a question every turn, never ``<DONE>`` (ends at ``user_limit``).
``loop``             calls the first golden call again and again (ends at ``agent_limit``).
``unknown-tool``     calls a tool that does not exist, then plays ``golden``.

``--ask-first`` makes every agent policy ask the user one question before its first call. The
simulated *user* (recognised by its system prompt) answers ``Yes, please go ahead.``; the *judge*
answers ``--judge-answer`` (Yes by default). The request's model name may override these per role:
``stub-llm:never-done+ask-first``, ``stub-llm:judge-no`` (``:`` then ``+``-separated options), so one
server plays every script. ``POST /stub/outage {"status": 503, "count": N}`` makes
the next N chat requests (all, when count is null; none with ``{"status": null}``) fail with that
status, to test retries and ``--resume``. With ``--api-key-env NAME`` a request must carry that
variable's value as its bearer token (401 otherwise).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from benchmark.envs import load_domain
from benchmark.llm import judge as judge_prompts
from benchmark.llm import user as user_prompts
from benchmark.tasks import BenchData, ToolInteraction

Policy = Literal["golden", "correct-on-hint", "never-done", "loop", "unknown-tool"]
POLICIES: tuple[Policy, ...] = ("golden", "correct-on-hint", "never-done", "loop", "unknown-tool")
LABEL = "[stub-llm test double]"
MODEL = "stub-llm (scripted test double)"
HINT_MARKER = "What to do:"
"""How the proxy renders a guard hint or a violation's remedy (proxy.server._hint_text)."""


@dataclass(frozen=True)
class _Script:
    golden: tuple[ToolInteraction, ...]
    fault: int | None
    """Index of the golden call sent without ``dropped`` (correct-on-hint), None if none fits."""
    dropped: str | None


class StubBrain:
    """Decides each answer from the request's messages (no state between requests)."""

    def __init__(
        self,
        bench: BenchData,
        policy: Policy,
        *,
        ask_first: bool = False,
        judge_answer: str = "Yes",
        domains: Sequence[str] = (),
    ) -> None:
        self.policy = policy
        self.ask_first = ask_first
        self.judge_answer = judge_answer
        self._by_domain_query: dict[tuple[str, str], list[_Script]] = {}
        self._domain_of_tools: dict[frozenset[str], str] = {}
        tasks = bench.tasks(domains or None)
        for name in sorted({t.domain for t in tasks}):
            domain = load_domain(name, bench.bundle)
            tools = domain.tools
            self._domain_of_tools[frozenset(tools)] = name
            for task in (t for t in tasks if t.domain == name):
                script = _fault_script(task.answer.golden_tool_interactions, tools)
                self._by_domain_query.setdefault((name, task.query), []).append(script)

    # -- roles ------------------------------------------------------------------------------------
    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The assistant message (``content`` and/or ``tool_calls``) for one chat request."""
        messages = list(body.get("messages") or [])
        system = str(messages[0].get("content") or "") if messages else ""
        options = str(body.get("model") or "").partition(":")[2].split("+")
        if system == user_prompts.SYSTEM_PROMPT:
            return {"content": f"Yes, please go ahead. {LABEL}"}
        if system == judge_prompts.SYSTEM_PROMPT:
            return {"content": "No" if "judge-no" in options else self.judge_answer}
        policy = next((p for p in POLICIES if p in options), self.policy)
        ask_first = self.ask_first or "ask-first" in options
        return self._agent(messages, body.get("tools") or [], policy, ask_first)

    def _agent(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        policy: Policy,
        ask_first: bool,
    ) -> dict[str, Any]:
        names = {str(t["function"]["name"]) for t in tools if t.get("type") == "function"}
        overlap = {d: len(tools_of & names) for tools_of, d in self._domain_of_tools.items()}
        domain = max(overlap, key=lambda d: overlap[d]) if overlap and max(overlap.values()) else None
        users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
        if domain is None or not users:
            return _text("I cannot tell which benchmark domain these tools belong to. <DONE>")
        scripts = self._by_domain_query.get((domain, users[0]), [])
        if len(scripts) != 1:
            why = "no" if not scripts else "more than one"
            return _text(f"The query matches {why} task of {domain}; nothing to replay. <DONE>")
        script = scripts[0]
        made = _calls_made(messages)
        if ask_first and not made and len(users) == 1:
            return _text("Before I start: may I go ahead with your request?")
        if policy == "never-done":
            return _text(f"Turn {len(users)}: could you tell me more about what you need?")
        if policy == "loop":
            first = (
                script.golden[0] if script.golden else ToolInteraction(tool=sorted(names)[0], parameters={})
            )
            return _call(first.tool, dict(first.parameters), len(made))
        if policy == "unknown-tool":
            if not made:
                return _call("no_such_tool_stub", {}, 0)
            made = made[1:]
        return self._next(script, made, len(_calls_made(messages)), policy)

    def _next(
        self, script: _Script, made: Sequence[tuple[str, str]], number: int, policy: Policy
    ) -> dict[str, Any]:
        faulty = policy == "correct-on-hint" and script.fault is not None
        i, faulted = 0, False
        for _, response in made:
            if faulty and i == script.fault and not faulted:
                faulted = True
                if HINT_MARKER in response:
                    continue  # the guard's hint understood: the same golden call again, correctly
            i += 1
        if i >= len(script.golden):
            return _text(f"All done: I made {number} call(s) for your request. <DONE>")
        call = script.golden[i]
        arguments = dict(call.parameters)
        if faulty and i == script.fault and not faulted and script.dropped is not None:
            arguments.pop(script.dropped, None)
        return _call(call.tool, arguments, number)


def _fault_script(golden: Sequence[ToolInteraction], tools: Mapping[str, Any]) -> _Script:
    for index, call in enumerate(golden):
        tool = tools.get(call.tool)
        if tool is None or not tool.writes:
            continue
        required = [r for r in (tool.input_schema.get("required") or []) if r in call.parameters]
        if required:
            return _Script(tuple(golden), index, str(required[0]))
    return _Script(tuple(golden), None, None)


def _calls_made(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(tool name, its response text) of every call the conversation holds, in order."""
    answers = {
        str(m.get("tool_call_id")): str(m.get("content") or "") for m in messages if m.get("role") == "tool"
    }
    out = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            out.append((str(call["function"]["name"]), answers.get(str(call["id"]), "")))
    return out


def _text(content: str) -> dict[str, Any]:
    return {"content": f"{LABEL} {content}"}


def _call(tool: str, arguments: dict[str, Any], number: int) -> dict[str, Any]:
    call = {
        "id": f"call_stub_{number}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }
    return {"content": None, "tool_calls": [call]}


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


@dataclass
class _Outage:
    status: int | None = None
    count: int | None = None

    def take(self) -> int | None:
        if self.status is None:
            return None
        if self.count is not None:
            if self.count <= 0:
                self.status = None
                return None
            self.count -= 1
        return self.status


def create_app(make_brain: Callable[[], StubBrain], api_key: str | None = None) -> FastAPI:
    """The FastAPI app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``POST /stub/outage``.
    ``make_brain`` runs on the first chat request (loading the domains takes seconds)."""
    app = FastAPI(title=MODEL)
    brains: list[StubBrain] = []
    outage = _Outage()
    served = {"chat": 0}

    def refused(request: Request) -> JSONResponse | None:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            return JSONResponse(
                {"error": {"message": "stub-llm: wrong or missing API key", "type": "auth"}}, 401
            )
        return None

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        return refused(request) or JSONResponse(
            {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        )

    @app.post("/stub/outage")
    async def set_outage(request: Request) -> JSONResponse:
        body = await request.json()
        outage.status = body.get("status")
        outage.count = body.get("count")
        return JSONResponse({"status": outage.status, "count": outage.count, "served": served["chat"]})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        denied = refused(request)
        if denied is not None:
            return denied
        failing = outage.take()
        if failing is not None:
            return JSONResponse({"error": {"message": f"stub-llm: scripted outage ({failing})"}}, failing)
        body = await request.json()
        served["chat"] += 1
        if not brains:
            brains.append(make_brain())
        message = brains[0].answer(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        prompt = _tokens([body.get("messages"), body.get("tools")])  # what a real tokenizer would see
        completion = _tokens(message)
        return JSONResponse(
            {
                "id": f"stub-{served['chat']}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": MODEL,
                "system_fingerprint": "stub-llm scripted test double; token counts are chars/4 estimates",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    return app


def api_key_from(env_name: str | None) -> str | None:
    if env_name is None:
        return None
    value = os.environ.get(env_name, "")
    if not value:
        raise ValueError(f"--api-key-env {env_name}: the variable is not set or is empty")
    return value
