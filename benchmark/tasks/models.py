"""The Task model: one ThinkingBox-Bench task, with its answer key kept apart.

Everything the agent (and the guard) may see is on :class:`Task`. The golden trajectory, expected
hashes and golden delta live in :class:`AnswerKey`, used only by conformance, the oracle agent and the
judge. Keeping them in their own object makes it easy to check that the guard never touches them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ToolInteraction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class ExpectedHashes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init_db_hash: str
    golden_db_hash: str
    hash_algo: str | None = None


class AnswerKey(BaseModel):
    """What a grader knows and an agent or guard must never read."""

    model_config = ConfigDict(extra="forbid")

    golden_tool_interactions: list[ToolInteraction]
    expected: ExpectedHashes | None = None
    golden_delta: dict[str, Any] | None = None
    golden_call_effects: list[dict[str, Any]] | None = None


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    domain: str
    scenario: str
    source_file: str
    test_name: str
    variant: Literal["base", "rubrics_yesno"] = "base"
    replaces: str | None = None
    query: str
    user_context: str
    data_patch: dict[str, list[dict[str, Any]]]
    rubrics_yesno: list[str] | None = None
    checks: list[str] = Field(default_factory=lambda: ["db_hash"])
    answer: AnswerKey
