"""``--agent llm``: a model behind an OpenAI-compatible endpoint plays the agent, closed loop.

The loop follows ThinkingBox's agent–user loop (docs/benchmark.md#the-llm-roles):

* the system prompts are think.yaml's ``system_instructions`` and the scenario's ``bot_instructions``
  (the runner's :class:`~benchmark.campaign.agents.AgentView`), then the task's query as the user;
* the tools are think.yaml's builtins (``InjectionAttackInToolResponse``, an end-turn tool) and the
  domain's, each ``{"type": "function", "function": {name, description, parameters}}`` with
  ``additionalProperties: false`` added, no parallel calls;
* calls run one at a time through the arm's tool surface, so the model reads the guard's own outcome
  text; an unknown name gets ``Error: function '<name>' does not exist`` and is not sent; arguments
  that are not a JSON object get the parse error as the tool's answer;
* an assistant text ending in ``<DONE>`` ends the conversation (``done``); the end-turn tool ends it
  unexecuted (``end_turn_tool``); any other text hands over to the simulated user, at most
  ``max_user_turns`` replies (``user_limit``); without a user endpoint or a task ``user_context`` the
  conversation cannot go on (``no_user_llm``); each tool-call batch and each visible text is one action,
  at most ``max_agent_actions`` (``agent_limit``: the call that reaches the cap still runs).

An endpoint failure (:class:`~benchmark.llm.client.EndpointError`) propagates: the runner records the
attempt as a system error. The row's ``usage`` has one entry per *agent* call, as ``tb infer`` records
it (so ``tb agg``'s token columns compare with published runs); every role's calls and tokens (agent,
user, judge) are summed under ``metadata.llm.usage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmark.campaign.agents import AgentView, Tools, ToolSpec, Transcript
from benchmark.campaign.results import (
    FinishReason,
    Message,
    ParallelToolCall,
    Text,
    ToolCall,
    ToolResponse,
)
from benchmark.llm.client import ChatClient, UsageMeter
from benchmark.llm.config import LlmConfig
from benchmark.llm.judge import NOT_GRADED, RubricJudge, final_response
from benchmark.llm.user import UserSimulator
from benchmark.tasks import Task

DONE = "<DONE>"


def builtin_tools(think_yaml: Path) -> list[ToolSpec]:
    """think.yaml's ``builtin_tools`` (all are end-turn tools in the benchmark's agent)."""
    raw = yaml.safe_load(think_yaml.read_text(encoding="utf-8")) or {}
    return [
        ToolSpec(str(t["name"]), str(t.get("description") or ""), dict(t.get("input_schema") or {}))
        for t in raw.get("builtin_tools") or []
        if t.get("is_end_turn")
    ]


def function_tool(spec: ToolSpec) -> dict[str, Any]:
    parameters = dict(spec.input_schema) or {"type": "object", "properties": {}}
    parameters["additionalProperties"] = False
    return {
        "type": "function",
        "function": {"name": spec.name, "description": spec.description, "parameters": parameters},
    }


class _Conversation:
    """One attempt: the row's messages and the chat-completions messages, kept in step."""

    def __init__(self, view: AgentView) -> None:
        self.row: list[Message] = [Text(role="system", content=p) for p in view.instructions]
        self.chat: list[dict[str, Any]] = [{"role": "system", "content": p} for p in view.instructions]
        self.served = ""
        self.user(view.query)

    def user(self, text: str, *, simulated: bool = False) -> None:
        self.row.append(Text(role="user", content=text, metadata={"is_user_llm": True} if simulated else {}))
        self.chat.append({"role": "user", "content": text})

    def assistant(self, text: str) -> None:
        meta: dict[str, Any] = {"tag": "text"}
        if text.strip().endswith(DONE):
            meta["is_done"] = True
        self.row.append(Text(role="assistant", content=text, metadata=meta))
        self.chat.append({"role": "assistant", "content": text})


class LlmAgent:
    """A model at an endpoint plays the agent; a second role the user; a third the rubric judge."""

    name = "llm"
    twin = False
    notes_key = "llm"

    def __init__(self, config: LlmConfig, tasks: Mapping[str, Task], think_yaml: Path) -> None:
        self.config = config
        self.label = f"llm (model {config.agent.model} at an OpenAI-compatible endpoint)"
        self._tasks = tasks
        """Read for the user simulator's private context and the rubric questions only: the model
        never sees them (the benchmark side of the trust boundary, as in the reference)."""
        self._builtins = builtin_tools(think_yaml)
        self._end_turn = {t.name for t in self._builtins}
        self.agent_client = ChatClient(config.agent, "agent")
        self.user = UserSimulator(ChatClient(config.user, "user")) if config.user else None
        self.judge = RubricJudge(ChatClient(config.judge, "judge")) if config.judge else None
        self.served_models: set[str] = set()
        """The model names the agent endpoint answered with (a test double names itself so)."""

    def cases(self, uid: str) -> Sequence[str | None]:
        return [None] if uid in self._tasks else []

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, view: AgentView, tools: Tools) -> Transcript:
        task = self._tasks[view.uid]
        meter = UsageMeter()
        talk = _Conversation(view)
        specs = [*self._builtins, *view.tools]
        chat_tools = [function_tool(s) for s in specs]
        known = {s.name for s in specs}
        actions = 0
        turn = 0
        finish: FinishReason | None = None
        while finish is None:
            finish, actions = self._agent_turn(talk, tools, chat_tools, known, meter, actions)
            if finish is not None:
                break
            turn += 1
            if turn > self.config.max_user_turns:
                finish = "user_limit"
            elif self.user is None or not task.user_context:
                finish = "no_user_llm"
            else:
                talk.user(self.user.reply(task, talk.row, meter), simulated=True)
        agent_calls = [u for u in meter.calls if getattr(u, "role", None) == "agent"]
        transcript = Transcript(messages=talk.row, finish_reason=finish, usage=agent_calls)
        transcript.notes = {
            "model": self.config.agent.model,
            "served_model": talk.served,
            "user_turns": min(turn, self.config.max_user_turns),
            "usage": meter.by_role(),
        }
        return transcript

    def _agent_turn(
        self,
        talk: _Conversation,
        tools: Tools,
        chat_tools: list[dict[str, Any]],
        known: set[str],
        meter: UsageMeter,
        actions: int,
    ) -> tuple[FinishReason | None, int]:
        """Completions until the model hands over to the user (None) or the conversation ends."""
        cap = self.config.max_agent_actions
        while True:
            completion = self.agent_client.complete(talk.chat, meter, chat_tools)
            self.served_models.add(completion.model)
            talk.served = completion.model
            message = completion.choices[0].message
            calls = list(message.tool_calls or [])
            if calls:
                actions += 1
                ended = self._run_calls(talk, tools, calls, known, message.content)
                if ended:
                    return "end_turn_tool", actions
                if actions >= cap:
                    return "agent_limit", actions
                continue
            text = message.content or ""
            if not text.strip():
                return None, actions  # an empty completion ends the agent's turn
            talk.assistant(text)
            actions += 1
            if text.strip().endswith(DONE):
                return "done", actions
            if actions >= cap:
                return "agent_limit", actions
            return None, actions

    def _run_calls(
        self, talk: _Conversation, tools: Tools, calls: list[Any], known: set[str], content: str | None
    ) -> bool:
        """Record and run one batch of calls in order; True when an end-turn tool was called."""
        recorded: list[ToolCall] = []
        parsed: list[tuple[Any, dict[str, Any] | None, str | None]] = []
        for call in calls:
            arguments, error = _arguments(call.function.arguments)
            recorded.append(
                ToolCall(
                    name=call.function.name,
                    arguments=arguments or {},
                    id=call.id,
                    metadata={"error": error} if error else {},
                )
            )
            parsed.append((call, arguments, error))
        ended = any(c.function.name in self._end_turn for c in calls)
        talk.row.append(
            ParallelToolCall(tool_calls=recorded, metadata={"is_end_turn_tool": True} if ended else {})
        )
        talk.chat.append(
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in calls
                ],
            }
        )
        for call, arguments, error in parsed:
            name = call.function.name
            meta: dict[str, Any] = {}
            if name in self._end_turn:
                text = ""  # not executed: the reference records an empty answer
            elif name not in known:
                text = f"Error: function '{name}' does not exist"
            elif error is not None or arguments is None:
                text = error or "Error: no arguments"
            else:
                reply = tools.call(name, arguments)
                text = reply.text
                if reply.is_error:
                    meta["is_error"] = True
                if reply.guard is not None:
                    meta["shadowguard_verdict"] = reply.guard
            talk.row.append(ToolResponse(name=name, content=text, id=call.id, metadata=meta))
            talk.chat.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return ended

    # -- the runner's hooks -----------------------------------------------------------------------
    def grade_rubrics(self, task: Task, transcript: Transcript) -> dict[str, Any]:
        """Rubric judging of a task whose database check passed: ``{"rubrics": pass|fail|not graded,
        "passed": bool, "answers": [...]}``; the judge's tokens are added to ``notes["usage"]``."""
        if self.judge is None:
            return {"rubrics": NOT_GRADED, "passed": False}
        meter = UsageMeter()
        grade = self.judge.grade(task, final_response(transcript.messages), meter)
        if transcript.notes is not None:
            transcript.notes["usage"] = dict(transcript.notes.get("usage") or {}) | meter.by_role()
        return {
            "rubrics": "pass" if grade.passed else "fail",
            "passed": grade.passed,
            "answers": [{"question": q, "yes": yes} for q, yes in grade.answers],
        }


def _arguments(raw: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The call's arguments, or the error text the model reads when they are not a JSON object."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return None, f"Error: the arguments are not valid JSON: {exc.msg} at position {exc.pos}"
    if not isinstance(value, dict):
        return None, f"Error: the arguments must be a JSON object, not {type(value).__name__}"
    return value, None
