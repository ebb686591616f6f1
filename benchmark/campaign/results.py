"""Campaign results: one JSONL row per attempt, in the shape and key order of ThinkingBox's ``DecodeResult``.

``tb agg`` and ``tb sbs`` read our files unchanged, and our ``bench agg`` reads plain ``tb infer`` rows
(docs/benchmark.md#results-rows). The top-level keys are fixed, in this order::

    uid, messages, test_result, test_context, test_tags, tools, raw_messages, user_llm_history,
    usage, metadata, is_system_error, finish_reason

Our own facts go under ``metadata`` (:class:`CampaignFacts`, key ``"shadowguard"``-free: the keys sit
beside ThinkingBox's own ``repetition``, ``agent``, ``scenario``...). A row without them (a plain
``tb infer`` row) is read as arm ``tb`` unless ``metadata.arm`` says otherwise.

Reading is strict: a malformed line is an error naming the file, the line and the field
(:class:`ResultsError`); nothing is guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ROW_KEYS = (
    "uid",
    "messages",
    "test_result",
    "test_context",
    "test_tags",
    "tools",
    "raw_messages",
    "user_llm_history",
    "usage",
    "metadata",
    "is_system_error",
    "finish_reason",
)

FinishReason = Literal[
    "done", "end_turn_tool", "agent_error", "agent_limit", "user_limit", "user_done", "no_user_llm", "skipped"
]
Outcome = Literal["success", "wrong_commit", "held", "false_block"]
"""What one attempt ended as (docs/architecture.md#outcomes)."""
OpenLoop = Literal["caught", "missed", "false_block", "clean_pass"]
"""An open-loop replay's 2 × 2 cell: unguarded judge (fail/pass) × the guard stopped it / let it commit."""


class _Open(BaseModel):
    """ThinkingBox models carry fields we do not use; keep them rather than reject a real row."""

    model_config = ConfigDict(extra="allow")


class Text(_Open):
    T: Literal["Text"] = "Text"
    role: Literal["system", "user", "assistant"]
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolCall(_Open):
    T: Literal["ToolCall"] = "ToolCall"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class ParallelToolCall(_Open):
    T: Literal["ParallelToolCall"] = "ParallelToolCall"
    tool_calls: list[ToolCall]
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolResponse(_Open):
    T: Literal["ToolResponse"] = "ToolResponse"
    name: str
    content: str
    id: str
    metadata: dict[str, Any] = Field(default_factory=dict)


Message = Annotated[Text | ParallelToolCall | ToolCall | ToolResponse, Field(discriminator="T")]


class TestResult(_Open):
    __test__ = False  # not a pytest class

    result: bool
    reward: float = Field(ge=0.0, le=1.0)
    is_system_error: bool = False
    tb: str = ""
    prints: str = ""
    lineno: int = -1
    line_content: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


class TestTags(_Open):
    __test__ = False

    labels: list[str] = Field(default_factory=list)
    category: list[str] = Field(default_factory=list)
    domain: str | None = None
    eval_type: str | None = None
    skip: bool = False


class TokenDetails(_Open):
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


class Usage(_Open):
    """One agent LLM call's tokens (ThinkingBox records agent calls only)."""

    input_tokens: int = 0
    input_tokens_details: TokenDetails | None = None
    output_tokens: int = 0
    output_tokens_details: TokenDetails | None = None
    total_tokens: int | None = None


class DecodeResult(BaseModel):
    """One attempt, as ``tb infer`` writes it. Unknown top-level keys are an error (a typo is not data)."""

    model_config = ConfigDict(extra="forbid")

    uid: str = Field(min_length=1)
    messages: list[Message] = Field(default_factory=list)
    test_result: TestResult | None = None
    test_context: dict[str, Any] | None = None
    test_tags: TestTags | None = None
    tools: list[dict[str, Any]] | None = None
    raw_messages: list[Any] | None = None
    user_llm_history: list[Any] | None = None
    usage: list[Usage] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    is_system_error: bool = False
    finish_reason: FinishReason = "done"

    def line(self) -> str:
        """The JSONL line (no newline): every field, in ``ROW_KEYS`` order."""
        return self.model_dump_json()


# -- our facts under metadata ---------------------------------------------------------------------
class GuardFacts(BaseModel):
    """What the guard did in one attempt (absent in the ``off`` arm)."""

    model_config = ConfigDict(extra="forbid")

    verdicts: dict[str, int] = Field(default_factory=dict)
    """Tool calls per verdict (allowed, rolled_back, refused, held, failed)."""
    violations: list[dict[str, Any]] = Field(default_factory=list)
    """``{rule_id, tool, phase}`` per violation (``tool`` is null at commit)."""
    retries: int = 0
    failed_calls: int = 0
    """Calls the agent was answered with a failure (the tool's own error, or an upstream fault)."""
    approvals: dict[str, int] = Field(default_factory=dict)
    """Requests made and their decisions: requested, approved, rejected, pending."""
    committed: bool = False
    committed_changes: int = 0
    """Net row changes the commit made durable."""
    commit_refused: bool = False
    intervened: bool = False
    """The guard stopped something: a call refused, rolled back or held, or the commit refused."""
    first_intervention: str | None = None
    """``tool: verdict (rule)`` of the first intervention."""
    added_ms: float = 0.0
    """Wall time the guard added: guarded attempt time minus the time spent in the tools."""


class SimulatedFacts(BaseModel):
    """A simulated agent's attempt (``metadata.simulated``): its profile, the assumptions it was played
    under (a simulated figure states them: docs/architecture.md#rules-that-keep-the-numbers-honest) and
    what it planned and did."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field(min_length=1)
    propensity: float = Field(ge=0, le=1)
    intent: str
    """``success`` or the failure signature the attempt was planned to fail by."""
    family: str | None = None
    fallback: str | None = None
    reactions: list[str] = Field(default_factory=list)
    feedback: dict[str, Annotated[float, Field(ge=0, le=1)]]
    """The probability of correcting course per feedback kind (assumed, never fitted)."""
    environment_share: float | None = Field(default=None, ge=0, le=1)
    """The share of tool-usage failures that are upstream faults (assumed)."""

    def parameters(self) -> str:
        """``profile: feedback k=v ...; environment_share=x``: what every simulated figure states."""
        text = f"{self.profile}: feedback " + " ".join(f"{k}={v:g}" for k, v in self.feedback.items())
        if self.environment_share is not None:
            text += f"; environment_share={self.environment_share:g}"
        return text


class CampaignFacts(BaseModel):
    """Our keys under ``metadata`` (beside ThinkingBox's ``scenario``, ``agent``, ``repetition``...)."""

    model_config = ConfigDict(extra="forbid")

    repetition: int = Field(ge=0)
    arm: str
    agent: str
    seed: int
    """The campaign's ``--seed``."""
    attempt_seed: int | None = None
    """The unit's seed, from (seed, uid, trajectory, repetition): its faults and retry jitter."""
    outcome: Outcome | None = None
    """None for a system-error row."""
    judge: dict[str, Any] = Field(default_factory=dict)
    """``db``: pass|fail; ``rubrics``: pass|fail|not_judged (why, when not judged)."""
    guard: GuardFacts | None = None
    twin_passed: bool | None = None
    """The same trajectory run unguarded in the same run passed the judge (oracle and replay agents)."""
    open_loop: OpenLoop | None = None
    trajectory: str | None = None
    """Where a replayed trajectory came from: ``FILE:LINE``."""
    faults: int = 0
    """Faults injected into this attempt's upstream calls."""
    signature: str | None = None
    """A failed attempt's failure signature (docs/benchmark.md#failure-signatures): tool_usage,
    no_state_change, incomplete_resolution, wrong_state_update, response_property; harness_error for
    system errors; None when the attempt passed."""
    upper_bound: bool = False
    """The arm reads the answer key (``oracle-ceiling``): its figures are an upper bound, not the product."""
    simulated: SimulatedFacts | None = None
    """A simulated agent's attempt: its profile and parameters (absent for any other agent)."""


def facts_of(row: DecodeResult) -> CampaignFacts | None:
    """Our facts on a row, or None for a plain ``tb infer`` row (no ``arm`` under metadata)."""
    md = row.metadata
    if "arm" not in md or "outcome" not in md:
        return None
    keys = CampaignFacts.model_fields
    return CampaignFacts.model_validate({k: v for k, v in md.items() if k in keys})


# -- reading and writing --------------------------------------------------------------------------
class ResultsError(ValueError):
    """A results or trajectories file that cannot be used; the message names file, line and field."""


def field_message(path: Path, line: int, exc: ValidationError, prefix: str = "") -> str:
    first = exc.errors()[0]
    where = prefix + ".".join(str(p) for p in first["loc"]) or "(row)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}:{line}: field {where}: {first['msg']}{more}"


def read_text(path: Path, error: type[ValueError] = ResultsError) -> str:
    """``path``'s UTF-8 text; unreadable or not text is ``error`` naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def json_object(text: str, path: Path, line: int, what: str = "a row") -> dict[str, Any]:
    """One JSONL line as an object; anything else is a :class:`ResultsError` naming file and line."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}:{line}: not JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(raw, dict):
        raise ResultsError(f"{path}:{line}: {what} must be a JSON object, not {type(raw).__name__}")
    return raw


def parse_row(text: str, path: Path, line: int) -> DecodeResult:
    raw = json_object(text, path, line)
    try:
        return DecodeResult.model_validate(raw)
    except ValidationError as exc:
        raise ResultsError(field_message(path, line, exc)) from None


def iter_results(path: Path, *, allow_torn_tail: bool = False) -> Iterator[tuple[int, DecodeResult]]:
    """(line number, row) for every row of ``path``. ``allow_torn_tail``: a last line without its
    newline that does not parse (a run stopped mid-write) is skipped instead of being an error."""
    text = read_text(path)
    lines = text.split("\n")
    torn = not text.endswith("\n") and text != ""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = number == len(lines)
        try:
            yield number, parse_row(line, path, number)
        except ResultsError:
            if allow_torn_tail and last and torn:
                return
            raise


def read_results(paths: Iterable[Path]) -> list[DecodeResult]:
    """Every row of every file, validated; the first bad line is an error naming file and line."""
    rows: list[DecodeResult] = []
    for path in paths:
        found = [row for _, row in iter_results(path)]
        if not found:
            raise ResultsError(f"{path}: no rows")
        rows += found
    return rows


def checked_facts(row: DecodeResult, path: Path, line: int) -> CampaignFacts | None:
    """:func:`facts_of`, with our keys under ``metadata`` that do not validate as a :class:`ResultsError`
    naming the file, the line and the field (``metadata.<key>``)."""
    try:
        return facts_of(row)
    except ValidationError as exc:
        raise ResultsError(field_message(path, line, exc, prefix="metadata.")) from None


def read_campaign_results(paths: Iterable[Path]) -> list[DecodeResult]:
    """:func:`read_results`, and every row carrying our facts (``metadata.arm`` and ``metadata.outcome``)
    also has them validated as :class:`CampaignFacts`: the first bad one is an error naming file, line
    and field. What the analysis commands read."""
    rows: list[DecodeResult] = []
    for path in paths:
        found: list[DecodeResult] = []
        for line, row in iter_results(path):
            checked_facts(row, path, line)
            found.append(row)
        if not found:
            raise ResultsError(f"{path}: no rows")
        rows += found
    return rows


def arm_of(row: DecodeResult) -> str:
    """The arm a row belongs to: ``metadata.arm``, else ``tb`` (a plain ``tb infer`` row)."""
    arm = row.metadata.get("arm")
    return arm if isinstance(arm, str) and arm else "tb"


def domain_of(row: DecodeResult) -> str:
    """The row's domain: its tags, else its scenario, else the uid's file stem's prefix."""
    if row.test_tags is not None and row.test_tags.domain:
        return row.test_tags.domain
    scenario = row.metadata.get("scenario")
    if isinstance(scenario, str) and scenario:
        return scenario
    return row.uid.split(".py:", 1)[0].rsplit("_group", 1)[0]


def passed(row: DecodeResult) -> bool:
    """Counted as ``tb agg`` counts: a system error or a missing/erroring test is a failure."""
    if row.is_system_error or row.test_result is None or row.test_result.is_system_error:
        return False
    return row.test_result.result
