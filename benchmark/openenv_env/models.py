"""The ThinkingBox OpenEnv contract: actions, observations and state.

Actions are discriminated on ``type``: ``list_tools``, ``call_tool``, ``call_tools``,
``submit_message`` and the trusted ``_finish``. On the wire the server accepts any object with a
``type`` (:class:`WireAction`) and validates it against these models itself, so a malformed action
is answered with an ``error`` observation naming the problem instead of a protocol error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from benchmark.openenv_env._openenv import Action, Observation, State

RESERVED_PREFIXES = ("__reserved__", "_finish")
"""Tool names an agent may not call: the harness's own (``__reserved__init`` ...) and the trusted
finish action's name."""

FINISH_REASONS = ("done", "end_turn_tool", "agent_limit", "user_limit", "user_done")
"""What a trusted ``_finish`` may give as its reason (ThinkingBox's finish reasons an agent loop ends
with; ``no_user_llm`` and ``agent_error`` are the server's own)."""

Kind = Literal["reset", "tools", "tool", "tool_batch", "user", "terminal", "error"]
ToolErrorKind = Literal["tool_not_found", "invalid_args", "execution_error"]
RewardType = Literal["pass", "fail", "system_error"]
Status = Literal["idle", "active", "finalizing", "done", "closed", "error"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListTools(_Strict):
    type: Literal["list_tools"] = "list_tools"


class CallTool(_Strict):
    type: Literal["call_tool"] = "call_tool"
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None


class ToolCallSpec(_Strict):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None


class CallTools(_Strict):
    type: Literal["call_tools"] = "call_tools"
    calls: list[ToolCallSpec] = Field(min_length=1)


class SubmitMessage(_Strict):
    type: Literal["submit_message"] = "submit_message"
    content: str


class Finish(_Strict):
    type: Literal["_finish"] = "_finish"
    reason: str = "done"


AnyAction = Annotated[ListTools | CallTool | CallTools | SubmitMessage | Finish, Field(discriminator="type")]
ACTION_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyAction)  # type: ignore[arg-type,unused-ignore]


class WireAction(Action):  # type: ignore[misc]
    """What the server accepts from the socket: an object with a ``type`` and whatever else; the
    episode validates it against :data:`AnyAction` and answers a bad one with an ``error``
    observation."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    type: Any = None


class ToolOutcome(BaseModel):
    """One call's result, as a ``tool`` observation or an entry of a ``tool_batch``."""

    name: str
    call_id: str | None = None
    tool_result: str
    tool_error: ToolErrorKind | None = None
    guard: dict[str, Any] | None = None
    """The guard's answer to the call (``verdict``, ``hint`` when it stopped the call); None under
    ``off``."""


class TBObservation(Observation):  # type: ignore[misc]
    """A ThinkingBox observation. ``reward`` is set only at the terminal step (1.0 pass, else 0.0)."""

    kind: Kind
    test_uid: str | None = None
    arm: str | None = None
    tools: list[dict[str, Any]] | None = None
    instructions: list[str] | None = None
    name: str | None = None
    call_id: str | None = None
    tool_result: str | None = None
    tool_error: ToolErrorKind | None = None
    guard: dict[str, Any] | None = None
    results: list[ToolOutcome] | None = None
    user_message: str | None = None
    finish_reason: str | None = None
    reward_type: RewardType | None = None
    test_summary: dict[str, Any] | None = None
    steps_taken: int = 0
    error: str | None = None


class TBState(State):  # type: ignore[misc]
    status: Status = "idle"
    test_uid: str | None = None
    arm: str | None = None
    finish_reason: str | None = None
    user_turns: int = 0


class BadInput(ValueError):
    """The client's request is wrong: answered with an ``error`` observation, nothing changed."""


def reserved(name: str) -> bool:
    return name.startswith(RESERVED_PREFIXES)
