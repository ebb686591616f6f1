"""``ThinkingBoxEnv``: the ThinkingBox OpenEnv client API on ``openenv``'s EnvClient.

Async by default (``await env.call_tool(...)``); ``ThinkingBoxEnv(base_url=...).sync()`` gives the
same methods synchronously. A loop written for ThinkingBox's client runs against this server
unchanged::

    async with ThinkingBoxEnv(base_url="ws://127.0.0.1:8000") as env:
        result = await env.reset(test_uid="sandbox_external_retail/...:test_x")
        tools = (await env.list_tools()).observation.tools
        result = await env.call_tool("get_order", {"order_id": "O1"}, call_id="c1")
        result = await env.submit_message("Done. <DONE>")
        print(result.reward, result.observation.test_summary)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from benchmark.openenv_env._openenv import EnvClient, StepResult
from benchmark.openenv_env.models import (
    CallTool,
    CallTools,
    Finish,
    ListTools,
    SubmitMessage,
    TBObservation,
    TBState,
    ToolCallSpec,
)


class Result(Protocol):
    """What a step returns: openenv's ``StepResult[TBObservation]``, stated here because openenv ships
    no type information."""

    observation: TBObservation
    reward: float | None
    done: bool


class ThinkingBoxEnv(EnvClient[Any, TBObservation, TBState]):  # type: ignore[misc]  # openenv is untyped
    """Actions are the models of :mod:`benchmark.openenv_env.models` (or a raw dict, sent as is)."""

    def _step_payload(self, action: Any) -> dict[str, Any]:
        if isinstance(action, BaseModel):
            return action.model_dump(exclude_none=True)
        if isinstance(action, Mapping):
            return dict(action)
        raise TypeError(f"an action is a model or a mapping, not {type(action).__name__}")

    def _parse_result(self, payload: dict[str, Any]) -> Result:
        obs = dict(payload.get("observation", {}))
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        observation = TBObservation(**obs, reward=reward, done=done)
        result: Result = StepResult(observation=observation, reward=reward, done=done)
        return result

    def _parse_state(self, payload: dict[str, Any]) -> TBState:
        return TBState(**payload)

    async def _step(self, action: BaseModel) -> Result:
        result: Result = await self.step(action)
        return result

    async def list_tools(self) -> Result:
        return await self._step(ListTools())

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, call_id: str | None = None
    ) -> Result:
        return await self._step(CallTool(name=name, arguments=dict(arguments or {}), call_id=call_id))

    async def call_tools(self, calls: Sequence[Mapping[str, Any]]) -> Result:
        """``calls``: ``[{"name": ..., "arguments": {...}, "call_id": ...}, ...]``, run in order."""
        return await self._step(CallTools(calls=[ToolCallSpec.model_validate(c) for c in calls]))

    async def submit_message(self, content: str) -> Result:
        return await self._step(SubmitMessage(content=content))

    async def finish(self, reason: str = "done") -> Result:
        """The trusted finish: ends the episode now and grades it."""
        return await self._step(Finish(reason=reason))
