"""The simulated agent: a profile's calibrated, unguarded behaviour, played closed loop
(docs/architecture.md#three-ways-to-measure).

Benchmark-internal: it reads the golden calls and the fault corpus, as the judge does; it lives on the
benchmark side of the trust boundary and the guard never sees what it reads. Every figure it produces
is labelled "simulated" with the profile's parameters. Its rows are byte-identical for the same seed:
they carry no wall times (``untimed``), and the guard's approval ids — random bearer tokens — are
recorded as ``apr_#N``.

**An attempt.** The task's propensity ``p`` is drawn once per campaign seed
(:func:`~benchmark.campaign.calibrate.draw_propensities`), so a task's repeats share it. The attempt
(seeded by its unit seed, so every arm of a unit plays the same plan) succeeds in intent with
probability ``p``: it plays the golden calls. Otherwise it fails by a signature drawn from the
profile's mix, instantiated as a concrete fault:

====================  ===============================================================================
tool_usage            an upstream environment fault (``environment_share`` of them: a 503, 429 or
                      refused connection on one golden write that the judge needs, raised before
                      the upstream runs it; the next try succeeds), else the corpus's
                      ``bad_argument`` mutation
wrong_state_update    a corpus mutation of the clean-failure shares: wrong values → ``wrong_value`` or
                      ``wrong_record``; extra effects → ``extra_write`` or ``duplicate_write``;
                      missing effects → ``missing_write``
incomplete_resolution the corpus's ``premature_stop``
no_state_change       the golden reads without any write
====================  ===============================================================================

A family the corpus has no mutation for on this task falls back to another family of the same
signature, then to any family of the task; the row's ``metadata.simulated`` names the family played and
any fallback. (One task of the benchmark has no write, so no fault of it fails the judge.)

**Feedback.** Each reply that is an error or a guard intervention is feedback of one kind — a raw tool
error, a classified hint (the guard's class and "What to do"), a policy violation (a cited policy), a
held call — read by the tool surface from the real outcome that produced it (``ToolReply.feedback``;
:func:`~benchmark.campaign.surfaces.feedback_of`); a refused commit is the fifth. With the profile's
probability for that kind the agent corrects course:
it plays, in order, the golden calls it has not yet made successfully. At most :data:`MAX_REACTIONS`
corrections per attempt. The uniform each decision is compared with comes from the unit seed and the
step, so arms and feedback settings are paired: up to the first decision that differs, a higher
probability corrects wherever a lower one does.

**Calibration.** ``p`` is the probability that an attempt succeeds in ``off``; a failure path is one
that failed there, so the raw errors it met in ``off`` did not help it. ``bench calibrate`` therefore
fixes ``raw_error`` at 0 for a calibrated profile; a non-zero value moves ``off`` away from the
published figures (the report states the value).

**Cost.** The published campaign cost spread over the golden trajectories' agent turns (calls + the
final answer): each turn is one ``Usage`` entry of ``output_tokens`` such that, at the price of
:data:`PRICE_PER_MTOK` USD per million output tokens, a golden-length campaign of 507 attempts costs the
published amount; corrections cost their extra turns.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from benchmark.campaign.agents import AgentView, ToolReply, Tools, Transcript
from benchmark.campaign.calibrate import draw_propensities
from benchmark.campaign.corpus import FAMILIES, Entry, fault_of
from benchmark.campaign.profiles import Profile
from benchmark.campaign.results import ParallelToolCall, Text, ToolCall, ToolResponse, Usage
from benchmark.envs import Database, Domain, Environment
from benchmark.tasks import Task, ToolInteraction
from guard.faults import FaultInjector, FaultPlan, InjectedFault
from guard.session import Executor, ToolResult

_APPROVAL_ID = re.compile(r"apr_[A-Za-z0-9_-]{16,}")
MAX_REACTIONS = 3
PRICE_PER_MTOK = 1.0
"""The nominal price (USD per million output tokens) the simulated usage is expressed in."""

_GROUPS: dict[str, tuple[str, ...]] = {
    "wrong_values": ("wrong_value", "wrong_record"),
    "extra_effects": ("extra_write", "duplicate_write"),
    "missing_effects": ("missing_write",),
}
_SIGNATURE_FAMILIES = {
    "tool_usage": ("bad_argument",),
    "wrong_state_update": ("wrong_value", "wrong_record", "extra_write", "duplicate_write", "missing_write"),
    "incomplete_resolution": ("premature_stop",),
}


def _uniform(*parts: object) -> float:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def feedback_kind(reply: ToolReply) -> str | None:
    """The kind of feedback a reply is: what the tool surface read from the real outcome that produced
    it (:func:`~benchmark.campaign.surfaces.feedback_of` for a guarded call; a tool error in ``off``)."""
    return reply.feedback


@dataclass(frozen=True)
class AttemptPlan:
    """What an attempt intends: its calls, and for a failure, how it fails."""

    calls: tuple[ToolInteraction, ...]
    intent: str
    """``success`` or the failure signature."""
    family: str | None = None
    fallback: str | None = None
    env_fault: tuple[int, str] | None = None
    """(golden call index, kind): that call's first try fails upstream before it runs."""


@dataclass
class OneShotFault:
    """An executor that fails one call once, with a :class:`~guard.faults.FaultInjector` of ``kind``
    at rate 1 (503, 429 and refused are raised before the upstream runs the call)."""

    execute: Executor
    target: ToolInteraction
    occurrence: int
    kind: str
    seed: int
    _seen: int = 0
    _injector: FaultInjector | None = None

    @property
    def injected(self) -> list[InjectedFault]:
        return self._injector.injected if self._injector is not None else []

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        if self._injector is None and tool == self.target.tool and dict(arguments) == self.target.parameters:
            self._seen += 1
            if self._seen == self.occurrence:
                plan = FaultPlan({self.kind: 1.0}, seed=self.seed)
                self._injector = FaultInjector(self.execute, plan, rng=random.Random(self.seed))  # noqa: S311
                return self._injector(tool, arguments)
        return self.execute(tool, arguments)


class SimulatedAgent:
    """A profile played closed loop (module docstring). ``twin`` is False: its trajectory depends on
    feedback, so it has no false-block figure (ADR 006)."""

    twin = False
    untimed = True
    """Rows carry no wall times (``execution_time`` and ``guard.added_ms`` are 0), so a campaign's results
    file is byte-identical for the same seed; the run metadata keeps the campaign's duration."""

    def __init__(
        self,
        profile: Profile,
        tasks: Sequence[Task],
        domains: Mapping[str, Domain],
        database: Database,
        seed: int,
    ) -> None:
        if profile.fit is None:
            raise ValueError(f"profile {profile.name} has no fit; run `shadowguard bench calibrate`")
        self.profile = profile
        self.name = profile.agent_name
        self.label = (
            f"{self.name} (simulated: calibrated to {profile.model}'s published figures; "
            f"feedback {profile.feedback.describe()}; benchmark-internal: reads the golden calls)"
        )
        self.seed = seed
        self._tasks = {t.id: t for t in tasks}
        self._domains = domains
        self._database = database
        by_domain: dict[str, list[str]] = {}
        for t in tasks:
            by_domain.setdefault(t.domain, []).append(t.id)
        self.propensity = draw_propensities(profile.fit, by_domain, seed)
        turns = sum(len(t.answer.golden_tool_interactions) + 1 for t in tasks)
        per_task = profile.published.campaign_cost_usd * len(tasks) / 507
        self.tokens_per_turn = round(per_task / turns / PRICE_PER_MTOK * 1_000_000)
        self._corpus: dict[tuple[str, str], Entry | None] = {}
        self._needed_writes: dict[tuple[str, int], bool] = {}
        self._plans: dict[tuple[str, int], AttemptPlan] = {}
        self._playing: dict[int, _Play] = {}
        """The attempt in flight (one at a time per process), for :meth:`after_commit_refused`."""
        self._decisions: list[tuple[Hashable, bool]] = []
        """The attempt in flight's decisions ((kind, where, step), answer), for the runner's memo."""

    def cases(self, uid: str) -> Sequence[str | None]:
        return [None] if uid in self._tasks else []

    # -- the plan ---------------------------------------------------------------------------------
    def _fault(self, task: Task, family: str) -> Entry | None:
        """The corpus's ``family`` fault of ``task`` for the campaign seed (built once per process)."""
        key = (task.id, family)
        if key not in self._corpus:
            if len(self._corpus) > 4096:
                self._corpus.clear()
            self._corpus[key] = fault_of(self._domains[task.domain], self._database, task, family, self.seed)
        return self._corpus[key]

    def _needed(self, task: Task, index: int) -> bool:
        """Whether the golden calls without call ``index`` fail the judge unguarded (an upstream fault
        there, ignored, then fails the attempt in ``off``)."""
        key = (task.id, index)
        if key not in self._needed_writes:
            calls = [c for i, c in enumerate(task.answer.golden_tool_interactions) if i != index]
            assert task.answer.expected is not None
            with Environment(self._domains[task.domain], self._database) as env:
                env.apply_patch(task.data_patch)
                for call in calls:
                    env.call_tool(call.tool, call.parameters)
                passed = env.state_hash() == task.answer.expected.golden_db_hash
            self._needed_writes[key] = not passed
        return self._needed_writes[key]

    def plan(self, view: AgentView) -> AttemptPlan:
        key = (view.uid, view.seed)
        if key not in self._plans:
            if len(self._plans) > 256:
                self._plans.clear()
            self._plans[key] = self._plan(view)
        return self._plans[key]

    def _plan(self, view: AgentView) -> AttemptPlan:
        task = self._tasks[view.uid]
        golden = tuple(task.answer.golden_tool_interactions)
        rng = random.Random(int(_uniform(view.seed, "plan") * 2**53))  # noqa: S311 - a seeded simulation
        if rng.random() < self.propensity[view.uid]:
            return AttemptPlan(golden, "success")
        mix = self.profile.failure_mix
        signature = rng.choices(list(mix.signatures), weights=list(mix.signatures.values()))[0]
        tools = self._domains[task.domain].tools
        writes = [i for i, c in enumerate(golden) if tools[c.tool].writes]
        if signature == "no_state_change":
            return AttemptPlan(tuple(c for c in golden if not tools[c.tool].writes), signature, "reads_only")
        if signature == "tool_usage" and writes and rng.random() < mix.environment_share:
            kinds = mix.environment_kinds
            kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
            index = next((i for i in rng.sample(writes, len(writes)) if self._needed(task, i)), None)
            if index is not None:
                return AttemptPlan(golden, signature, "environment", env_fault=(index, kind))
        if signature == "wrong_state_update":
            clean = mix.clean.model_dump()
            group = rng.choices(list(_GROUPS), weights=[clean[g] for g in _GROUPS])[0]
            wanted = rng.choice(_GROUPS[group])
        else:
            wanted = _SIGNATURE_FAMILIES[signature][0]
        entry, fallback = self._fault(task, wanted), None
        if entry is None:
            same = [f for f in _SIGNATURE_FAMILIES[signature] if f != wanted]
            others = [f for f in FAMILIES if f not in same and f != wanted]
            rng.shuffle(same)
            rng.shuffle(others)
            entry = next((e for f in [*same, *others] if (e := self._fault(task, f)) is not None), None)
            if entry is None:
                return AttemptPlan(golden, signature, None, fallback=f"{wanted}: no fault of this task fails")
            fallback = f"{wanted} -> {entry.family}"
        calls = tuple(ToolInteraction(tool=c["tool"], parameters=c["arguments"]) for c in entry.calls)
        return AttemptPlan(calls, signature, entry.family, fallback=fallback)

    def upstream(self, view: AgentView, execute: Executor) -> Executor:
        """The attempt's upstream: ``execute``, or with the plan's environment fault."""
        plan = self.plan(view)
        if plan.env_fault is None:
            return execute
        index, kind = plan.env_fault
        golden = self._tasks[view.uid].answer.golden_tool_interactions
        occurrence = 1 + sum(1 for c in golden[:index] if c == golden[index])
        return OneShotFault(execute, golden[index], occurrence, kind, view.seed)

    # -- playing it -------------------------------------------------------------------------------
    def run(self, view: AgentView, tools: Tools) -> Transcript:
        plan = self.plan(view)
        self._decisions = []
        golden = list(self._tasks[view.uid].answer.golden_tool_interactions)
        state = _Play(view, tools, golden, self.tokens_per_turn)
        state.play(list(plan.calls), self, "call")
        state.transcript.usage.append(state.turn())
        state.transcript.notes = {
            "profile": self.profile.name,
            "propensity": round(self.propensity[view.uid], 6),
            "intent": plan.intent,
            "family": plan.family,
            "fallback": plan.fallback,
            "reactions": state.reactions,
            "feedback": self.profile.feedback.model_dump(),
            "environment_share": self.profile.failure_mix.environment_share,
        }
        self._playing = {id(state.transcript): state}
        return state.transcript

    def after_commit_refused(self, view: AgentView, transcript: Transcript, message: str) -> bool:
        """The orchestrator's commit was refused with ``message``: whether the agent corrected course
        (it then made its remaining golden calls in the same session, and asks for the commit again)."""
        state = self._playing.pop(id(transcript), None)
        if state is None:
            return False
        transcript.messages.append(Text(role="user", content=message))
        if not state.decide("commit_refused", self, "commit"):
            return False
        state.play(state.remaining(), self, "after-commit")
        assert transcript.notes is not None
        transcript.notes["reactions"] = state.reactions
        return True

    def decide(self, view: AgentView, kind: str, where: str, step: int) -> bool:
        answer = self._answer(view, (kind, where, step))
        self._decisions.append(((kind, where, step), answer))
        return answer

    def _answer(self, view: AgentView, query: Hashable) -> bool:
        kind, where, step = cast(tuple[str, str, int], query)
        return _uniform(view.seed, "react", where, step) < self.profile.feedback.of(kind)

    # -- the runner's memo (benchmark.campaign.memo) ------------------------------------------------
    def memo_key(self, view: AgentView, arm: str) -> Hashable | None:
        """The attempt's plan on ``arm``: everything but the reaction draws that decides the attempt.
        None for a refused connection: the injector draws which error it raises from the attempt seed."""
        plan = self.plan(view)
        if plan.env_fault is not None and plan.env_fault[1] == "refused":
            return None
        calls = json.dumps([[c.tool, c.parameters] for c in plan.calls], sort_keys=True, default=str)
        return (arm, view.case, plan.intent, plan.family, plan.fallback, plan.env_fault, calls)

    def decisions(self) -> Sequence[tuple[Hashable, bool]]:
        return tuple(self._decisions)

    def replays(self, view: AgentView, decisions: Sequence[tuple[Hashable, bool]]) -> bool:
        return all(self._answer(view, query) == answer for query, answer in decisions)


class _Play:
    """One attempt's conversation: the calls made, the golden calls achieved, the corrections."""

    def __init__(self, view: AgentView, tools: Tools, golden: list[ToolInteraction], tokens: int) -> None:
        self.view = view
        self.tools = tools
        self.golden = golden
        self.done = [False] * len(golden)
        self.tokens = tokens
        self.transcript = Transcript(messages=[Text(role="user", content=view.query)])
        self.reactions: list[str] = []
        self.approval_ids: dict[str, int] = {}
        self.calls = 0

    def redact(self, text: str) -> str:
        """``text`` with each approval id (a random bearer token) as ``apr_#N``, N its order of first
        appearance in the attempt: the row stays byte-identical for the same seed and holds no token."""

        def number(match: re.Match[str]) -> str:
            return f"apr_#{self.approval_ids.setdefault(match.group(0), len(self.approval_ids) + 1)}"

        return _APPROVAL_ID.sub(number, text)

    def turn(self) -> Usage:
        return Usage(output_tokens=self.tokens, total_tokens=self.tokens)

    def remaining(self) -> list[ToolInteraction]:
        return [c for c, d in zip(self.golden, self.done, strict=True) if not d]

    def decide(self, kind: str, agent: SimulatedAgent, where: str) -> bool:
        if len(self.reactions) >= MAX_REACTIONS:
            return False
        if agent.decide(self.view, kind, where, len(self.reactions)):
            self.reactions.append(kind)
            return True
        return False

    def play(self, queue: list[ToolInteraction], agent: SimulatedAgent, where: str) -> None:
        while queue:
            call = queue.pop(0)
            call_id = f"call_{self.calls}"
            self.calls += 1
            self.transcript.usage.append(self.turn())
            self.transcript.messages.append(
                ParallelToolCall(
                    tool_calls=[ToolCall(name=call.tool, arguments=dict(call.parameters), id=call_id)]
                )
            )
            reply = self.tools.call(call.tool, call.parameters)
            meta: dict[str, Any] = {"is_error": True} if reply.is_error else {}
            if reply.guard is not None:
                meta["shadowguard_verdict"] = reply.guard
            self.transcript.messages.append(
                ToolResponse(name=call.tool, content=self.redact(reply.text), id=call_id, metadata=meta)
            )
            kind = feedback_kind(reply)
            if kind is None:
                for i, (g, d) in enumerate(zip(self.golden, self.done, strict=True)):
                    if not d and g == call:
                        self.done[i] = True
                        break
                continue
            if self.decide(kind, agent, f"{where}:{self.calls}"):
                queue = self.remaining()
