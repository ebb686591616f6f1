"""What the server's episodes share (tasks, domains, packs, the database, the approval store, the
hooks) and one live episode's state (:class:`Live`)."""

from __future__ import annotations

import random
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from benchmark.campaign.arms import ARMS, Arm
from benchmark.campaign.runner import domain_pack, instructions
from benchmark.campaign.surfaces import GuardedTools, Reviewer
from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.guarded import backend_for, executor_for, is_error_text, tool_infos
from benchmark.openenv_env.hooks import RubricJudge, UserSimulator
from benchmark.openenv_env.models import BadInput, ToolOutcome
from benchmark.tasks import BenchData, Task
from guard.approvals.gate import ApprovalGate, policy_version
from guard.approvals.sql import SqlApprovalStore
from guard.models import Verdict
from guard.policy import PolicyPack
from guard.retry import DEFAULT_BUDGETS, RetryPolicy
from guard.session import GuardSession

SERVABLE_ARMS = tuple(name for name, arm in ARMS.items() if not arm.oracle)
"""Every arm but ``oracle-ceiling``: the served guard never reads the answer key."""
STOPS = (Verdict.REFUSED, Verdict.HELD, Verdict.ROLLED_BACK)


@dataclass
class Shared:
    bench: BenchData
    database: Database
    default_arm: str = "guard"
    reviewer: Reviewer = "approve-matching"
    policy_dir: Path = Path("policies")
    user: UserSimulator | None = None
    judge: RubricJudge | None = None
    max_user_turns: int = 10
    llm_endpoints: dict[str, Any] = field(default_factory=dict)
    """The user/judge endpoints of ``--llm-config`` (URL and model), shown by ``/ready``."""
    domains_served: tuple[str, ...] = ()
    """Only these domains' tasks (default: all)."""
    tasks: dict[str, Task] = field(init=False)
    domains: dict[str, Domain] = field(init=False)
    packs: dict[str, PolicyPack] = field(init=False)
    versions: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        if self.default_arm not in SERVABLE_ARMS:
            raise ValueError(f"unknown arm {self.default_arm!r}; servable: {', '.join(SERVABLE_ARMS)}")
        self.tasks = {t.id: t for t in self.bench.tasks(self.domains_served or None)}
        self.domains, self.packs, self.versions = {}, {}, {}
        for name in sorted({t.domain for t in self.tasks.values()}):
            self.domains[name] = load_domain(name, self.bench.bundle)
            self.packs[name] = domain_pack(self.policy_dir, self.domains[name])
            self.versions[name] = policy_version(self.packs[name])
        self._tmp = tempfile.TemporaryDirectory(prefix="shadowguard-openenv-")
        self.approvals = SqlApprovalStore(f"sqlite:///{Path(self._tmp.name) / 'approvals.sqlite'}")
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Open (and close) one environment per domain: a bad --db or data fails at start, and the
        per-domain templates exist before concurrent episodes copy them."""
        for domain in self.domains.values():
            Environment(domain, self.database).close()

    def arm(self, name: str | None) -> Arm:
        chosen = name or self.default_arm
        if chosen not in SERVABLE_ARMS:
            raise BadInput(f"unknown arm {chosen!r}; one of {', '.join(SERVABLE_ARMS)}")
        return ARMS[chosen]

    def close(self) -> None:
        self.approvals.close()
        self._tmp.cleanup()
        self.database.dispose()


@dataclass
class Live:
    """One episode between reset and its terminal step."""

    shared: Shared
    task: Task
    arm: Arm
    episode_id: str
    env: Environment
    instructions: tuple[str, ...]
    session: GuardSession | None = None
    surface: GuardedTools | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    final_response: str | None = None
    steps: int = 0
    user_turns: int = 0
    calls: int = 0
    _result_hash: str | None = None

    def tool_list(self) -> list[dict[str, Any]]:
        hidden = self.session.policy.hidden if self.session is not None else frozenset()
        return [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in self.env.tools.values()
            if t.name not in hidden
        ]

    def call(self, name: str, arguments: Mapping[str, Any], call_id: str | None) -> ToolOutcome:
        """One tool call through the arm, classified as ThinkingBox classifies tool errors."""
        self.calls += 1
        self.transcript.append(
            {"role": "assistant", "tool_calls": [{"name": name, "arguments": dict(arguments), "id": call_id}]}
        )
        tool = self.env.tools.get(name)
        if tool is None:
            out = ToolOutcome(
                name=name, call_id=call_id, tool_result=f"Unknown tool: {name}", tool_error="tool_not_found"
            )
        elif self.surface is None:
            text = executor_for(self.env)(name, arguments).text
            out = ToolOutcome(
                name=name, call_id=call_id, tool_result=text, tool_error=self._kind(name, arguments, text)
            )
        else:
            reply = self.surface.call(name, arguments)
            outcome = self.surface.final[-1]
            guard: dict[str, Any] = {"verdict": outcome.verdict.value}
            if outcome.verdict in STOPS:
                guard["hint"] = reply.text
                guard["rules"] = [v.rule_id for v in outcome.violations]
                if outcome.error_class:
                    guard["error_class"] = outcome.error_class
            error = self._kind(name, arguments, reply.text, stopped=reply.is_error)
            out = ToolOutcome(
                name=name, call_id=call_id, tool_result=reply.text, tool_error=error, guard=guard
            )
        self.transcript.append({"role": "tool", "name": name, "id": call_id, "content": out.tool_result})
        return out

    def _kind(self, name: str, arguments: Mapping[str, Any], text: str, stopped: bool = False) -> Any:
        """None for a result; else ``invalid_args`` when the tool's input model rejects the arguments,
        ``execution_error`` otherwise (a tool's in-band error, or the guard's refusal or hold)."""
        if not stopped and not is_error_text(text):
            return None
        try:
            self.env.tools[name].input_model.model_validate(dict(arguments))
        except ValidationError:
            return "invalid_args"
        return "execution_error"

    def finish(self) -> dict[str, Any] | None:
        """The orchestrator's commit of a guarded episode; the guard's verdict summary (None: off)."""
        if self.session is None:
            self._result_hash = self.env.state_hash()
            self.env.close()
            return None
        commit = self.session.commit()
        if not commit.committed:
            self.session.rollback()
        self._result_hash = self.env.state_hash()
        self.env.close()
        return guard_summary(self.session, self.surface, commit.committed, commit.violations)

    def discard(self) -> int:
        """Roll everything back and free the environment; the number of calls thrown away."""
        if self.session is not None and not self.session.closed:
            self.session.rollback()
        if not self.env.closed:
            self.env.connection.rollback()
            self.env.close()
        return self.calls

    def result_hash(self) -> str:
        assert self._result_hash is not None, "finish() first"
        return self._result_hash

    def golden_hash(self) -> str:
        expected = self.task.answer.expected
        if expected is None:
            raise ValueError(f"{self.task.id}: the task has no expected hashes; it cannot be judged")
        return expected.golden_db_hash


def open_live(shared: Shared, task: Task, arm: Arm, episode_id: str | None) -> Live:
    env = Environment(shared.domains[task.domain], shared.database)
    try:
        env.apply_patch(task.data_patch)
        live = Live(
            shared,
            task,
            arm,
            episode_id or f"ep-{uuid.uuid4().hex[:12]}",
            env,
            instructions(shared.bench, task.scenario),
        )
        live.transcript.append({"role": "user", "content": task.query})
        if arm.guarded:
            _guard(live)
        return live
    except BaseException:
        env.close()
        raise


def _guard(live: Live) -> None:
    shared, task, arm = live.shared, live.task, live.arm
    gate = None
    if arm.has("approvals"):
        gate = ApprovalGate(
            shared.approvals,
            policy_version=shared.versions[task.domain],
            consumer="openenv",
            expires_after_s=3600,
        )
    budgets = dict(DEFAULT_BUDGETS) if arm.has("retries") else {}
    live.session = GuardSession(
        backend_for(live.env),
        executor_for(live.env),
        tool_infos(live.env),
        arm.pack(shared.packs[task.domain]),
        session_id=f"openenv:{live.episode_id}:{task.id}:{arm.name}",
        retry=RetryPolicy(budgets=budgets, rng=random.Random()),  # noqa: S311
        gate=gate,
    )
    live.surface = GuardedTools(live.session, shared.reviewer, gate)


def guard_summary(
    session: GuardSession, surface: GuardedTools | None, committed: bool, commit_violations: list[Any]
) -> dict[str, Any]:
    verdicts: Counter[str] = Counter(o.verdict.value for o in session.outcomes)
    final = surface.final if surface is not None else []
    stops = [o for o in final if o.verdict in STOPS]
    summary: dict[str, Any] = {
        "verdicts": dict(sorted(verdicts.items())),
        "committed": committed,
        "violations": [
            {"rule_id": v.rule_id, "tool": o.call.tool, "verdict": o.verdict.value}
            for o in session.outcomes
            for v in o.violations
        ]
        + [{"rule_id": v.rule_id, "tool": None, "verdict": "commit_refused"} for v in commit_violations],
        "intervened": bool(stops) or not committed,
    }
    if surface is not None and surface.decisions:
        summary["approvals"] = dict(surface.decisions)
    if stops:
        first = stops[0]
        rule = first.violations[0].rule_id if first.violations else first.error_class
        summary["first_intervention"] = f"{first.call.tool}: {first.verdict.value} ({rule})"
    elif not committed:
        summary["first_intervention"] = f"commit: refused ({commit_violations[0].rule_id})"
    return summary
