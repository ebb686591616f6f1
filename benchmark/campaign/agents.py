"""The Agent seam: what a campaign's agent sees, what it returns, and the first two agents.

An agent sees only what a production agent sees (:class:`AgentView`): the user's query, the tool
schemas, the system instructions (the benchmark's agent prompt and the scenario's policy), a handle on
the simulated user, and the results of the calls it makes through :class:`Tools`. It returns a
:class:`Transcript` in ThinkingBox's message shapes. The runner decides what the attempt left behind.

* :class:`OracleAgent` plays each task's golden calls. It reads the answer key, so it is
  benchmark-internal (its label says so): a sanity check and the false-block measure, never a model.
* :class:`ReplayAgent` replays recorded trajectories open loop (docs/architecture.md#three-ways-to-measure):
  it stops at the guard's first intervention, because an open-loop replay cannot know how the agent would
  have reacted. Trajectories come from a ThinkingBox results JSONL (tool calls read from ``messages``) or
  from ``{uid, calls: [{tool, arguments}]}`` lines.

* :class:`~benchmark.campaign.simulated.SimulatedAgent` plays a calibrated profile closed loop.

Two optional hooks an agent may define, which the runner calls when present: ``upstream(view,
execute) -> Executor`` (the attempt's upstream, e.g. with the agent's own environment fault) and
``after_commit_refused(view, transcript, message) -> bool`` (the orchestrator's commit was refused; True
when the agent made further calls in the same session and asks for the commit again). An agent with
``untimed = True`` gets rows without wall times (byte-identical for the same seed). An agent with
``grade_rubrics(task, transcript) -> {"rubrics", "passed", ...}`` judges the rubric tasks whose database
check passed (:class:`~benchmark.llm.agent.LlmAgent`); ``notes_key`` names the metadata key its
``Transcript.notes`` go under (default ``simulated``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmark.campaign.results import (
    FinishReason,
    Message,
    ParallelToolCall,
    ResultsError,
    Text,
    ToolCall,
    ToolResponse,
    Usage,
    field_message,
    json_object,
    parse_row,
    read_text,
)
from benchmark.tasks import ToolInteraction

Feedback = Literal["raw_error", "classified_hint", "policy_violation", "commit_refused", "held"]
"""The kinds of feedback an agent can meet (docs/architecture.md#three-ways-to-measure): the tool's raw
error, the guard's classified hint (an error class and what to do), a violation citing a policy, a
refused commit, a held call."""

INTERVENTIONS = frozenset({"refused", "rolled_back", "held"})
"""Guard verdicts that stop a call (a ``failed`` call is the tool's own failure, guard or not)."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ToolReply:
    """What one call returned to the agent: the text it reads, and the guard's verdict when a guard is
    in front (the proxy's ``_meta["shadowguard/outcome"].verdict``; None without a guard)."""

    text: str
    is_error: bool = False
    guard: str | None = None
    feedback: Feedback | None = None
    """The kind of feedback the reply is, read by the tool surface from what produced it (the guard's
    real :class:`~guard.models.ToolOutcome`, or the tool's own error in ``off``); None: no feedback."""

    @property
    def intervened(self) -> bool:
        return self.guard in INTERVENTIONS


class Tools(Protocol):
    """The tool surface one attempt's agent calls (straight to the tools, or through the guard)."""

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolReply: ...


class UserSimulator(Protocol):
    """The simulated user. ``reply`` gets the conversation so far and returns the user's next message,
    or None when there is no simulated user (ThinkingBox's ``no_user_llm``)."""

    def reply(self, messages: Sequence[Message]) -> str | None: ...


class NoUser:
    """No user simulator: the conversation cannot go past the query."""

    def reply(self, messages: Sequence[Message]) -> str | None:
        return None


@dataclass(frozen=True)
class AgentView:
    """Everything an agent may see of a task. No answer key, no task internals beyond the query."""

    uid: str
    query: str
    tools: Sequence[ToolSpec]
    instructions: Sequence[str]
    """System prompts, in order: the agent definition's, then the scenario's policy."""
    user: UserSimulator
    seed: int
    case: str | None = None
    """Which of the agent's cases for this uid is run (:meth:`Agent.cases`), e.g. a trajectory id."""


@dataclass
class Transcript:
    messages: list[Message] = field(default_factory=list)
    finish_reason: FinishReason = "done"
    usage: list[Usage] = field(default_factory=list)
    commit: bool = True
    """Whether the agent's work should be committed at the end (an open-loop replay stopped by the
    guard asks for nothing to be committed: it stopped where the agent would have had to react)."""
    stopped_at: str | None = None
    """An open-loop replay: the call the guard stopped (``tool: verdict``)."""
    notes: dict[str, Any] | None = None
    """What the agent records about itself on the row (``metadata.simulated`` for a simulated agent)."""


class Agent(Protocol):
    name: str
    label: str
    """How outputs name it, e.g. ``oracle (benchmark-internal: plays the golden calls)``."""
    twin: bool
    """Its trajectory does not depend on feedback, so the same trajectory run unguarded in the same run
    tells a false block from an agent failure (oracle and replay agents)."""

    def cases(self, uid: str) -> Sequence[str | None]:
        """The attempts to make per repetition and arm for a task: ``[None]`` for one."""
        ...

    def run(self, view: AgentView, tools: Tools) -> Transcript: ...


def _play(view: AgentView, tools: Tools, calls: Sequence[ToolInteraction], *, stop: bool) -> Transcript:
    """Send ``calls`` in order, recording them as ThinkingBox messages; ``stop`` at an intervention."""
    transcript = Transcript(messages=[Text(role="user", content=view.query)])
    for i, call in enumerate(calls):
        call_id = f"call_{i}"
        transcript.messages.append(
            ParallelToolCall(
                tool_calls=[ToolCall(name=call.tool, arguments=dict(call.parameters), id=call_id)]
            )
        )
        reply = tools.call(call.tool, call.parameters)
        meta: dict[str, Any] = {"is_error": True} if reply.is_error else {}
        if reply.guard is not None:
            meta["shadowguard_verdict"] = reply.guard
        transcript.messages.append(
            ToolResponse(name=call.tool, content=reply.text, id=call_id, metadata=meta)
        )
        if stop and reply.intervened:
            transcript.commit = False
            transcript.stopped_at = f"{call.tool}: {reply.guard}"
            break
    return transcript


class OracleAgent:
    """Plays the golden calls of each task and ignores feedback. Benchmark-internal: reads the answer key."""

    name = "oracle"
    label = "oracle (benchmark-internal: plays the golden calls)"
    twin = True

    def __init__(self, golden: Mapping[str, Sequence[ToolInteraction]]) -> None:
        self._golden = golden

    def cases(self, uid: str) -> Sequence[str | None]:
        return [None] if uid in self._golden else []

    def run(self, view: AgentView, tools: Tools) -> Transcript:
        return _play(view, tools, self._golden[view.uid], stop=False)


# -- recorded trajectories ------------------------------------------------------------------------
class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class _Simple(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uid: str = Field(min_length=1)
    calls: list[_Call]
    kind: Literal["fault", "variant"] | None = None
    """A fault-corpus line (``bench faults``): a mutation of a golden, or an equivalent variant."""
    family: str | None = None
    golden_call: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class Trajectory:
    id: str
    """``FILE:LINE``."""
    uid: str
    calls: tuple[ToolInteraction, ...]
    source_arm: str | None = None
    """The arm of the results row it came from (None for a ``{uid, calls}`` line)."""
    source_repetition: int | None = None


def _calls_of_messages(messages: Sequence[Message]) -> tuple[ToolInteraction, ...]:
    """The tool calls a results row made, in order (a ToolCall inside or outside a ParallelToolCall)."""
    out: list[ToolInteraction] = []
    for message in messages:
        if isinstance(message, ParallelToolCall):
            if message.metadata.get("is_end_turn_tool"):
                continue
            out += [ToolInteraction(tool=c.name, parameters=c.arguments) for c in message.tool_calls]
        elif isinstance(message, ToolCall):
            out.append(ToolInteraction(tool=message.name, parameters=message.arguments))
    return tuple(out)


def load_trajectories(path: Path, known_uids: set[str]) -> list[Trajectory]:
    """Every trajectory in ``path``, validated. A line is a results row (it has ``messages``) or a
    ``{uid, calls}`` object. A uid the benchmark does not have is an error naming file and line."""
    out: list[Trajectory] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        raw = json_object(line, path, number, what="a trajectory")
        where = f"{path}:{number}"
        if "messages" in raw:
            row = parse_row(line, path, number)
            if row.is_system_error:
                continue  # a system-error row recorded no trajectory to replay
            repetition = row.metadata.get("repetition")
            arm = row.metadata.get("arm")
            trajectory = Trajectory(
                where,
                row.uid,
                _calls_of_messages(row.messages),
                source_arm=arm if isinstance(arm, str) else None,
                source_repetition=repetition if isinstance(repetition, int) else None,
            )
        else:
            try:
                simple = _Simple.model_validate(raw)
            except ValidationError as exc:
                raise ResultsError(field_message(path, number, exc)) from None
            calls = tuple(ToolInteraction(tool=c.tool, parameters=c.arguments) for c in simple.calls)
            trajectory = Trajectory(where, simple.uid, calls)
        if trajectory.uid not in known_uids:
            raise ResultsError(f"{where}: field uid: no benchmark task has the uid {trajectory.uid!r}")
        out.append(trajectory)
    if not out:
        raise ResultsError(f"{path}: no trajectories")
    return out


class ReplayAgent:
    """Replays recorded trajectories open loop: stops at the guard's first intervention."""

    name = "replay"
    label = "replay (open loop: recorded trajectories)"
    twin = True

    def __init__(self, trajectories: Sequence[Trajectory]) -> None:
        self.trajectories = {t.id: t for t in trajectories}
        self._by_uid: dict[str, list[str]] = {}
        for t in trajectories:
            self._by_uid.setdefault(t.uid, []).append(t.id)

    def cases(self, uid: str) -> Sequence[str | None]:
        return self._by_uid.get(uid, [])

    def run(self, view: AgentView, tools: Tools) -> Transcript:
        assert view.case is not None, "a replay attempt names its trajectory"
        return _play(view, tools, self.trajectories[view.case].calls, stop=True)


AGENTS = ("oracle", "replay", "simulated", "llm")
