"""``--llm-config FILE``: the LLM-agent work's user simulator and rubric judge behind the two seams.

Adapters only: the prompts, the parsing of the replies, the retries and the endpoint errors are
:mod:`benchmark.llm`'s (the same config file as ``bench run --agent llm``; its ``user`` and ``judge``
roles are used, ``agent`` is not). The episode's transcript (chat dicts) becomes the row messages
:class:`benchmark.llm.user.UserSimulator` reads. An endpoint that fails after its retries raises
:class:`~benchmark.llm.client.EndpointError`, which the episode turns into a ``system_error`` terminal
step (reward 0, everything rolled back), never a fail or a pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.campaign.results import Message, Text, ToolCall, ToolResponse
from benchmark.llm.client import ChatClient
from benchmark.llm.config import load_llm_config
from benchmark.llm.judge import RubricGrade
from benchmark.llm.judge import RubricJudge as LlmJudgeCore
from benchmark.llm.user import UserSimulator as LlmUserCore
from benchmark.tasks import Task


def as_messages(transcript: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The episode's transcript as result-row messages: user and assistant texts, tool calls and
    their responses (a call without a ``call_id`` gets a positional one)."""
    out: list[Message] = []
    for number, entry in enumerate(transcript):
        role = entry.get("role")
        if role == "tool":
            call_id = entry.get("id") or f"call_{number - 1}"
            out.append(ToolResponse(name=str(entry["name"]), content=str(entry["content"]), id=call_id))
        elif role == "assistant" and entry.get("tool_calls"):
            for call in entry["tool_calls"]:
                call_id = call.get("id") or f"call_{number}"
                out.append(ToolCall(name=str(call["name"]), arguments=dict(call["arguments"]), id=call_id))
        elif role in ("user", "assistant"):
            out.append(Text(role=role, content=str(entry["content"])))
        else:
            raise ValueError(f"transcript entry {number}: unknown role {role!r}")
    return out


class LlmUser:
    """:class:`~benchmark.openenv_env.hooks.UserSimulator` over the LLM-agent work's user simulator."""

    def __init__(self, core: LlmUserCore) -> None:
        self.core = core

    def reply(self, task: Task, transcript: Sequence[dict[str, Any]]) -> str:
        return self.core.reply(task, as_messages(transcript))


class LlmJudge:
    """:class:`~benchmark.openenv_env.hooks.RubricJudge` over the LLM-agent work's rubric judge; the
    grade keeps every question's answer (``test_summary.rubric_answers``)."""

    def __init__(self, core: LlmJudgeCore) -> None:
        self.core = core

    def grade(self, task: Task, final_response: str) -> RubricGrade:
        return self.core.grade(task, final_response)


@dataclass(frozen=True)
class LlmHooks:
    """What ``--llm-config`` gives the server; ``user``/``judge`` None when the file switches the
    role off (``user: none``, ``judge: none``)."""

    user: LlmUser | None
    judge: LlmJudge | None
    max_user_turns: int
    clients: tuple[ChatClient, ...]

    def describe(self) -> dict[str, Any]:
        """The roles' endpoints for ``/ready`` (URL and model; never a key)."""
        return {c.role: {"base_url": c.endpoint.base_url, "model": c.endpoint.model} for c in self.clients}

    def close(self) -> None:
        for client in self.clients:
            client.close()


def load_llm_hooks(path: Path | str) -> LlmHooks:
    """The user and judge of the config at ``path``; a bad file or an unset API key variable raises
    :class:`~benchmark.llm.config.LlmConfigError` (a ``ValueError``) naming the problem."""
    config = load_llm_config(path)
    user = ChatClient(config.user, "user") if config.user else None
    judge = ChatClient(config.judge, "judge") if config.judge else None
    return LlmHooks(
        user=LlmUser(LlmUserCore(user)) if user else None,
        judge=LlmJudge(LlmJudgeCore(judge)) if judge else None,
        max_user_turns=config.max_user_turns,
        clients=tuple(c for c in (user, judge) if c is not None),
    )
