"""The campaign runner: agents × arms × repeats over the benchmark tasks, one results row per attempt.

Every attempt gets a fresh isolated environment and, in a guarded arm, its own
:class:`~guard.session.GuardSession` with the domain's pack cut to the arm's levers
(:mod:`benchmark.campaign.arms`). The agent talks to a :class:`~benchmark.campaign.agents.Tools`
surface: straight to the tools (``off``) or through the guard, whose answers are rendered exactly as
the proxy renders them for a production agent. At the end the orchestrator commits a guarded session
(the at-commit checks decide); the judge then grades the state **the arm let through**
(../shared/docs/LIFT.md §1): for ``off`` everything the tools did, for a guarded arm only what was
committed.

A unit of work is one (task, case, repetition) with all its arms: an agent whose trajectory does not
depend on feedback (oracle, replay) also runs unguarded there, so a guarded failure whose unguarded
twin passes is told apart as a false block. Units are seeded from (seed, uid, case, repetition), so a
subset, a resumed run and every arm of a unit see the same injected faults.

The judge is the benchmark's database check (golden-state hash equality). The 30 rubric tasks' yes/no
rubrics need an LLM judge: an agent that has one (``--agent llm``, its ``grade_rubrics`` hook) grades
them after the database check passed; for the others they are recorded as ``not_judged``.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from benchmark.campaign.agents import (
    Agent,
    AgentView,
    NoUser,
    OracleAgent,
    ReplayAgent,
    ToolSpec,
    Transcript,
    load_trajectories,
)
from benchmark.campaign.arms import ARMS, Arm
from benchmark.campaign.memo import AttemptMemo, MemoAgent
from benchmark.campaign.outcomes import classify_outcome, phase_of, state_signature
from benchmark.campaign.results import (
    CampaignFacts,
    DecodeResult,
    GuardFacts,
    Outcome,
    TestResult,
    TestTags,
    passed,
)
from benchmark.campaign.surfaces import Clocked, DirectTools, GuardedTools, Reviewer
from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.envs.hashing import StableState, stable_rows, state_delta, state_hash
from benchmark.guarded import (
    GoldenStateCheck,
    backend_for,
    executor_for,
    load_domain_policy,
    tool_infos,
)
from benchmark.tasks import BenchData, Task, resolve_data
from guard.approvals.gate import ApprovalGate, policy_version
from guard.approvals.sql import SqlApprovalStore
from guard.classifier import Classifier
from guard.effects import ToolInfo
from guard.faults import FaultInjector, FaultPlan
from guard.models import Verdict
from guard.policy import EMPTY, PolicyPack
from guard.retry import DEFAULT_BUDGETS, RetryPolicy, VirtualClock
from guard.session import Executor, GuardSession

RUBRICS_NOT_JUDGED = "not_judged: the yes/no rubrics need an LLM judge endpoint; graded on the database only"


@dataclass(frozen=True)
class CampaignConfig:
    """Everything that decides a campaign's rows (recorded in the run metadata; holds no secret)."""

    agent: str
    arms: tuple[str, ...]
    repeat: int = 1
    domains: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    """The tasks to run, resolved from --domain/--tasks (the runner does not re-filter)."""
    seed: int = 0
    faults: str | None = None
    policy_dir: str = "policies"
    reviewer: Reviewer = "approve-matching"
    trajectories: str | None = None
    data: str | None = None
    db: str | None = None
    profile: str | None = None
    """--agent simulated: the profile's name or file."""
    feedback: tuple[tuple[str, float], ...] = ()
    """--agent simulated: feedback probabilities replacing the profile's."""
    llm_config: str | None = None
    """--agent llm: the endpoints file (benchmark.llm.config; holds key variable names, never keys)."""
    through_proxy: bool = False
    """The agent's calls go through a real ``shadowguard serve`` (benchmark.llm.proxied)."""
    proxy_era: str = "2026-07-28"
    """--through-proxy: the MCP protocol era the agent's client speaks (legacy or 2026-07-28)."""


@dataclass(frozen=True)
class UnitKey:
    uid: str
    case: str | None
    repetition: int


@dataclass
class AttemptSummary:
    """What the main process needs of a row without parsing it (progress, the last line)."""

    uid: str
    case: str | None
    repetition: int
    arm: str
    passed: bool
    outcome: Outcome | None
    system_error: bool
    line: str


def summary_of(row: DecodeResult, line: str) -> AttemptSummary:
    """The summary of a row read back from a results file (``--resume``)."""
    md = row.metadata
    trajectory = md.get("trajectory")
    return AttemptSummary(
        row.uid,
        trajectory if isinstance(trajectory, str) else None,
        int(md["repetition"]),
        str(md["arm"]),
        passed(row),
        md.get("outcome"),
        row.is_system_error,
        line,
    )


def unit_seed(seed: int, key: UnitKey) -> int:
    text = f"{seed}:{key.uid}:{key.case or ''}:{key.repetition}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


# -- one worker's state ---------------------------------------------------------------------------
@dataclass
class _Judged:
    passed: bool
    result_hash: str
    golden_hash: str
    rubrics: dict[str, Any] | None = None
    """The agent's rubric grading (``grade_rubrics`` hook), when it has one and the DB check passed."""


@dataclass
class _Attempt:
    arm: Arm
    transcript: Transcript
    judged: _Judged
    guard: GuardFacts | None
    faults: int
    result_delta: dict[str, Any] | None
    seconds: float


class Worker:
    """Runs units: loads the data, the domains, the packs and the agent once (per process)."""

    def __init__(self, config: CampaignConfig, store_dir: Path | None = None) -> None:
        self.config = config
        self.bench: BenchData = resolve_data(config.data)
        self.database = Database(config.db)
        self.tasks = {t.id: t for t in self.bench.tasks(config.domains or None)}
        self.domains: dict[str, Domain] = {}
        self.packs: dict[str, PolicyPack] = {}
        self.versions: dict[str, str] = {}
        for name in sorted({t.domain for t in self.tasks.values()}):
            self.domains[name] = load_domain(name, self.bench.bundle)
            self.packs[name] = domain_pack(Path(config.policy_dir), self.domains[name])
            self.versions[name] = policy_version(self.packs[name])
        self.arms = [ARMS[a] for a in config.arms]
        self.agent = make_agent(config, self.bench, set(self.tasks), self.database)
        self.plan = FaultPlan.parse(config.faults, seed=config.seed) if config.faults else None
        self._store_dir = store_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._store: SqlApprovalStore | None = None
        self._init_state: dict[str, Any] = {}
        self.memo: AttemptMemo | None = AttemptMemo() if isinstance(self.agent, MemoAgent) else None
        """Attempts of a deterministic agent that are the same attempt, run once (benchmark.campaign.memo)."""
        self._arm_packs: dict[tuple[str, str], tuple[PolicyPack, Classifier]] = {}
        self._tool_infos: dict[str, dict[str, ToolInfo]] = {}
        self._tool_specs: dict[str, tuple[ToolSpec, ...]] = {}

    def close(self) -> None:
        stack = getattr(self, "proxy_stack", None)  # --through-proxy: the worker's servers
        if stack is not None:
            stack.close()
        if self._store is not None:
            self._store.close()
        if self._tmp is not None:
            self._tmp.cleanup()
        self.database.dispose()

    def _approvals(self) -> SqlApprovalStore:
        if self._store is None:
            base = self._store_dir
            if base is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="shadowguard-campaign-")
                base = Path(self._tmp.name)
            self._store = SqlApprovalStore(f"sqlite:///{base / 'approvals.sqlite'}")
        return self._store

    def units(self) -> list[UnitKey]:
        """Every unit of the campaign, task by task (all repetitions of a task together)."""
        ordered = self.config.task_ids or tuple(self.tasks)
        return [
            UnitKey(uid, case, rep)
            for uid in ordered
            for case in self.agent.cases(uid)
            for rep in range(self.config.repeat)
        ]

    # -- a unit -----------------------------------------------------------------------------------
    def run_unit(self, key: UnitKey, arms: Sequence[str] | None = None) -> list[AttemptSummary]:
        """The rows of ``key`` for ``arms`` (default: all the campaign's arms), in the campaign's order."""
        task = self.tasks[key.uid]
        seed = unit_seed(self.config.seed, key)
        wanted = [ARMS[a] for a in arms] if arms is not None else self.arms
        results: dict[str, _Attempt | BaseException] = {}
        order = sorted(wanted, key=lambda a: a.guarded)  # off first: it is the twin
        twin: bool | None = None
        for arm in order:
            try:
                results[arm.name] = self._attempt(task, key, arm, seed)
            except Exception as exc:  # a harness error: recorded as a system-error row, never graded
                results[arm.name] = exc
        if self.agent.twin:
            off = results.get("off")
            if off is None and any(a.guarded for a in wanted):
                try:
                    off = self._attempt(task, key, ARMS["off"], seed)
                except Exception as exc:
                    off = exc
            if isinstance(off, _Attempt):
                twin = off.judged.passed
        out = []
        for arm in wanted:
            got = results[arm.name]
            if isinstance(got, BaseException):
                out.append(self._error_row(task, key, arm, seed, got))
            else:
                out.append(self._row(task, key, got, seed, twin))
        return out

    def _attempt(self, task: Task, key: UnitKey, arm: Arm, seed: int) -> _Attempt:
        if self.config.through_proxy:
            from benchmark.llm.proxied import proxied_attempt

            return proxied_attempt(self, task, key, arm, seed)
        view = self._view(task, key, seed)
        memo_key = self.agent.memo_key(view, arm.name) if isinstance(self.agent, MemoAgent) else None
        if memo_key is not None and self.memo is not None:
            hit: _Attempt | None = self.memo.find(self.agent, view, memo_key)  # type: ignore[arg-type]
            if hit is not None:
                return hit
        attempt = self._run_attempt(task, view, arm, seed)
        if memo_key is not None and self.memo is not None:
            self.memo.add(self.agent, view, memo_key, attempt)  # type: ignore[arg-type]
        return attempt

    def _run_attempt(self, task: Task, view: AgentView, arm: Arm, seed: int) -> _Attempt:
        started = time.perf_counter()
        domain = self.domains[task.domain]
        with Environment(domain, self.database) as env:
            env.apply_patch(task.data_patch)
            initial = self._initial_state(task, env)
            env.state.written.clear()  # from here on: the attempt's writes (_final_state)
            clock = VirtualClock()
            timed = Clocked(executor_for(env))
            execute: Executor = timed
            injector: FaultInjector | None = None
            if self.plan is not None:
                injector = FaultInjector(timed, self.plan, clock=clock, rng=random.Random(seed))  # noqa: S311
                execute = injector
            upstream = getattr(self.agent, "upstream", None)
            if upstream is not None:
                execute = upstream(view, execute)
            facts: GuardFacts | None = None
            delta: dict[str, Any] | None = None
            if not arm.guarded:
                transcript = self.agent.run(view, DirectTools(execute))
            else:
                transcript, facts = self._guarded(task, env, arm, execute, view, clock, seed)
            final = self._final_state(env, initial)
            judged = self._judge(task, final)
            self._grade_rubrics(task, transcript, judged)
            if not judged.passed:
                delta = state_delta(initial, final, domain.tables)
            if facts is not None and not getattr(self.agent, "untimed", False):
                spent = time.perf_counter() - started
                facts.added_ms = round(max(spent - timed.seconds, 0.0) * 1000, 3)
            faults = len(injector.injected) if injector is not None else 0
            faults += len(getattr(execute, "injected", ())) if execute is not injector else 0
        return _Attempt(arm, transcript, judged, facts, faults, delta, time.perf_counter() - started)

    def _guarded(
        self,
        task: Task,
        env: Environment,
        arm: Arm,
        execute: Executor,
        view: AgentView,
        clock: VirtualClock,
        seed: int,
    ) -> tuple[Transcript, GuardFacts]:
        pack, classifier = self._arm_pack(arm, task.domain)
        gate: ApprovalGate | None = None
        session_id = f"{task.id}#{view.case or ''}#{seed:x}#{arm.name}"
        if arm.has("approvals"):
            gate = ApprovalGate(
                self._approvals(),
                policy_version=self.versions[task.domain],
                consumer="campaign",
                expires_after_s=3600,
            )
        budgets = dict(DEFAULT_BUDGETS) if arm.has("retries") else {}
        retry = RetryPolicy(budgets=budgets, clock=clock, rng=random.Random(seed + 1))  # noqa: S311
        extra = []
        if arm.oracle:
            assert task.answer.expected is not None
            extra.append(GoldenStateCheck(env, task.answer.expected.golden_db_hash))
        session = GuardSession(
            backend_for(env),
            execute,
            self._infos(env),
            pack,
            session_id=session_id,
            retry=retry,
            extra_checks=extra,
            classifier=classifier,
            gate=gate,
        )
        tools = GuardedTools(session, self.config.reviewer, gate)
        transcript = self.agent.run(view, tools)
        facts = GuardFacts()
        commit_violations: list[dict[str, Any]] = []
        refused_once = False
        if transcript.commit:
            commit = session.commit()
            react = getattr(self.agent, "after_commit_refused", None)
            if not commit.committed and react is not None:
                from proxy.server import render_commit

                rendered = render_commit(commit, session.session_id)
                text = "\n".join(block.text for block in rendered.content if block.type == "text")
                if react(view, transcript, text):
                    refused_once = True
                    commit_violations = [
                        {"rule_id": v.rule_id, "tool": None, "phase": "at_commit"} for v in commit.violations
                    ]
                    commit = session.commit()
            facts.committed = commit.committed
            facts.committed_changes = len(commit.changes) if commit.committed else 0
            facts.commit_refused = not commit.committed
            commit_violations += [
                {"rule_id": v.rule_id, "tool": None, "phase": "at_commit"} for v in commit.violations
            ]
            if not commit.committed:
                session.rollback()
        else:
            session.rollback()
        verdicts: Counter[str] = Counter(o.verdict.value for o in session.outcomes)
        facts.verdicts = dict(sorted(verdicts.items()))
        facts.violations = [
            {"rule_id": v.rule_id, "tool": o.call.tool, "phase": phase_of(o.verdict)}
            for o in session.outcomes
            for v in o.violations
        ] + commit_violations
        facts.retries = sum(o.retries for o in session.outcomes)
        requested = {o.approval_id for o in session.outcomes if o.verdict is Verdict.HELD and o.approval_id}
        if gate is not None:
            facts.approvals = {
                "requested": len(requested),
                "approved": tools.decisions["approved"],
                "rejected": tools.decisions["rejected"],
                "pending": sum(1 for i in requested if gate.store.get(i).state.value == "pending"),
            }
        stops = [o for o in tools.final if o.verdict in (Verdict.REFUSED, Verdict.ROLLED_BACK, Verdict.HELD)]
        facts.intervened = bool(stops) or facts.commit_refused or refused_once
        facts.failed_calls = sum(1 for o in tools.final if o.verdict is Verdict.FAILED)
        if stops:
            first = stops[0]
            rule = first.violations[0].rule_id if first.violations else first.error_class
            facts.first_intervention = f"{first.call.tool}: {first.verdict.value} ({rule})"
        elif facts.commit_refused or refused_once:
            facts.first_intervention = f"commit: refused ({commit_violations[0]['rule_id']})"
        return transcript, facts

    def _arm_pack(self, arm: Arm, domain: str) -> tuple[PolicyPack, Classifier]:
        """The domain's pack cut to ``arm`` and its error classifier, built once per worker (both are
        pure functions of the pack and the arm; a session only reads them)."""
        key = (arm.name, domain)
        got = self._arm_packs.get(key)
        if got is None:
            pack = arm.pack(self.packs[domain])
            got = self._arm_packs[key] = (pack, Classifier.for_policy(pack))
        return got

    def _infos(self, env: Environment) -> dict[str, ToolInfo]:
        """The guard's view of the domain's tools (the same for every attempt of the domain)."""
        infos = self._tool_infos.get(env.domain.name)
        if infos is None:
            infos = self._tool_infos[env.domain.name] = tool_infos(env)
        return infos

    @staticmethod
    def _final_state(env: Environment, initial: StableState) -> StableState:
        """The attempt's stable end state: the tables it wrote to read back, the others as they
        started (nothing else writes an environment's tables: every tool write goes through its
        SqlState, and the guard only rolls such writes back). Equal to ``env.stable_state()``."""
        written = env.state.written
        return {
            name: stable_rows(spec, env.state.rows(name)) if name in written else initial[name]
            for name, spec in env.domain.tables.items()
        }

    def _initial_state(self, task: Task, env: Environment) -> StableState:
        """The task's stable state after init (cached per task: every attempt starts from it)."""
        state = self._init_state.get(task.id)
        if state is None:
            if len(self._init_state) > 32:
                self._init_state.clear()
            state = self._init_state[task.id] = env.stable_state()
        return state

    def _view(self, task: Task, key: UnitKey, seed: int) -> AgentView:
        tools = self._tool_specs.get(task.domain)
        if tools is None:
            domain = self.domains[task.domain]
            tools = tuple(ToolSpec(t.name, t.description, t.input_schema) for t in domain.tools.values())
            self._tool_specs[task.domain] = tools
        return AgentView(
            uid=task.id,
            query=task.query,
            tools=tools,
            instructions=instructions(self.bench, task.scenario),
            user=NoUser(),
            seed=seed,
            case=key.case,
        )

    def _grade_rubrics(self, task: Task, transcript: Transcript, judged: _Judged) -> None:
        """The agent's rubric judge (``grade_rubrics(task, transcript) -> {rubrics, passed, ...}``), run
        only when the database check passed, as the reference's tests do."""
        grade = getattr(self.agent, "grade_rubrics", None)
        if grade is None or not task.rubrics_yesno:
            return
        if not judged.passed:
            judged.rubrics = {"rubrics": "not run: the database check failed first"}
            return
        judged.rubrics = grade(task, transcript)
        judged.passed = bool(judged.rubrics["passed"])

    def _judge(self, task: Task, final: StableState) -> _Judged:
        expected = task.answer.expected
        if expected is None:
            raise ValueError(f"{task.id}: the task has no expected hashes; it cannot be judged")
        result = state_hash(final)
        return _Judged(result == expected.golden_db_hash, result, expected.golden_db_hash)

    # -- rows -------------------------------------------------------------------------------------
    def _base_metadata(self, task: Task, key: UnitKey) -> dict[str, Any]:
        return {
            "scenario": task.scenario,
            "agent": self.agent.name,
            "test_case_file": task.source_file.rsplit("/", 1)[-1],
            "test_case_name": task.test_name,
            "repetition": key.repetition,
        }

    def _row(self, task: Task, key: UnitKey, got: _Attempt, seed: int, twin: bool | None) -> AttemptSummary:
        arm, judged, guard = got.arm, got.judged, got.guard
        outcome = classify_outcome(arm, judged.passed, guard, twin if self.agent.twin else None)
        open_loop = None
        if isinstance(self.agent, ReplayAgent) and arm.guarded and twin is not None and guard is not None:
            open_loop = {
                (False, True): "caught",
                (False, False): "missed",
                (True, True): "false_block",
                (True, False): "clean_pass",
            }[(twin, guard.intervened)]
        db_passed = judged.result_hash == judged.golden_hash
        judge: dict[str, Any] = {"db": "pass" if db_passed else "fail"}
        if judged.rubrics is not None:
            judge.update({k: v for k, v in judged.rubrics.items() if k != "passed"})
        elif task.rubrics_yesno:
            judge["rubrics"] = RUBRICS_NOT_JUDGED
        facts = CampaignFacts(
            repetition=key.repetition,
            arm=arm.name,
            agent=self.agent.name,
            seed=self.config.seed,
            attempt_seed=seed,
            outcome=outcome,
            judge=judge,
            guard=guard,
            twin_passed=twin if arm.guarded else None,
            open_loop=open_loop,  # type: ignore[arg-type]
            trajectory=key.case,
            faults=got.faults,
            upper_bound=arm.oracle,
        )
        metadata = self._base_metadata(task, key) | facts.model_dump(mode="json", exclude_none=True)
        untimed = getattr(self.agent, "untimed", False)
        metadata["execution_time"] = 0.0 if untimed else round(got.seconds, 6)
        if got.transcript.notes is not None:
            metadata[getattr(self.agent, "notes_key", "simulated")] = got.transcript.notes
        test = TestResult(result=judged.passed, reward=1.0 if judged.passed else 0.0)
        if db_passed and not judged.passed:
            test.tb = f"AssertionError: rubric: {(judged.rubrics or {}).get('rubrics')}"
            test.line_content = "validate_rubrics_yesno(x, judge)"
        elif not judged.passed:
            test.tb = (
                f"AssertionError: Database hash {judged.result_hash} does not match golden hash "
                f"{judged.golden_hash}"
            )
            test.line_content = "validate_database(x)"
        row = DecodeResult(
            uid=task.id,
            messages=got.transcript.messages,
            test_result=test,
            test_tags=TestTags(),
            usage=got.transcript.usage,
            metadata=metadata,
            finish_reason=got.transcript.finish_reason,
        )
        if db_passed and not judged.passed:
            row.metadata["signature"] = "response_property"  # the rubrics judged the final response
        elif not judged.passed:
            row.metadata["signature"] = state_signature(row, got.result_delta, task.answer.golden_delta)
        return AttemptSummary(
            key.uid, key.case, key.repetition, arm.name, judged.passed, outcome, False, row.line()
        )

    def _error_row(self, task: Task, key: UnitKey, arm: Arm, seed: int, exc: BaseException) -> AttemptSummary:
        metadata = self._base_metadata(task, key) | {
            "arm": arm.name,
            "seed": self.config.seed,
            "attempt_seed": seed,
            "outcome": None,
            "signature": "harness_error",
            "error": {
                "type": type(exc).__name__,
                "message": str(exc),
                "tb": "".join(traceback.format_exception(exc)),
            },
        }
        if key.case is not None:
            metadata["trajectory"] = key.case
        row = DecodeResult(uid=task.id, metadata=metadata, is_system_error=True, test_tags=TestTags())
        return AttemptSummary(key.uid, key.case, key.repetition, arm.name, False, None, True, row.line())


# -- loading --------------------------------------------------------------------------------------
def domain_pack(policy_dir: Path, domain: Domain) -> PolicyPack:
    """``<policy_dir>/<domain>/policy.yaml``, validated against the domain; the empty pack if absent."""
    path = policy_dir / domain.name / "policy.yaml"
    if not path.is_file():
        return EMPTY
    return load_domain_policy(path, domain)


@lru_cache(maxsize=16)
def _read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _dataset_root(bench: BenchData) -> Path:
    root = bench.tasks_root / "dataset" if bench.kind == "checkout" else bench.bundle / "data" / "dataset"
    return root


def instructions(bench: BenchData, scenario: str) -> tuple[str, ...]:
    """The system prompts a ThinkingBox agent gets: think.yaml's, then the scenario's policy."""
    root = _dataset_root(bench)
    agent = _read_yaml(root / "agent" / "think.yaml")
    scen = _read_yaml(root / "scenario" / f"{scenario}.yaml")
    out = [str(agent.get("system_instructions") or "")]
    if scen.get("bot_instructions"):
        out.append(str(scen["bot_instructions"]))
    return tuple(p for p in out if p)


def make_agent(
    config: CampaignConfig, bench: BenchData, uids: set[str], database: Database | None = None
) -> Agent:
    if config.agent == "oracle":
        tasks = bench.tasks(config.domains or None)
        return OracleAgent({t.id: t.answer.golden_tool_interactions for t in tasks})
    if config.agent == "replay":
        if config.trajectories is None:
            raise ValueError("--agent replay needs --trajectories FILE")
        return ReplayAgent(load_trajectories(Path(config.trajectories), uids))
    if config.agent == "simulated":
        from benchmark.campaign.profiles import load_profile
        from benchmark.campaign.simulated import SimulatedAgent

        if config.profile is None:
            raise ValueError("--agent simulated needs --profile NAME")
        profile = load_profile(config.profile, fitted=True)
        if config.feedback:
            profile = profile.with_feedback(**dict(config.feedback))
        tasks = bench.tasks(None)
        domains = {name: load_domain(name, bench.bundle) for name in sorted({t.domain for t in tasks})}
        return SimulatedAgent(profile, tasks, domains, database or Database(config.db), config.seed)
    if config.agent == "llm":
        from benchmark.llm.agent import LlmAgent
        from benchmark.llm.config import load_llm_config

        if config.llm_config is None:
            raise ValueError("--agent llm needs --llm-config FILE")
        by_id = {t.id: t for t in bench.tasks(config.domains or None)}
        return LlmAgent(
            load_llm_config(config.llm_config), by_id, _dataset_root(bench) / "agent" / "think.yaml"
        )
    raise ValueError(f"unknown agent {config.agent!r}; known: oracle, replay, simulated, llm")


# -- worker processes -----------------------------------------------------------------------------
_WORKER: Worker | None = None


def _init_process(config: CampaignConfig) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    global _WORKER
    _WORKER = Worker(config)


def _run_in_process(job: tuple[UnitKey, tuple[str, ...]]) -> list[AttemptSummary]:
    assert _WORKER is not None
    return _WORKER.run_unit(job[0], job[1])


def run_units(
    config: CampaignConfig,
    jobs: Sequence[tuple[UnitKey, tuple[str, ...]]],
    workers: int,
    worker: Worker | None = None,
) -> Iterator[list[AttemptSummary]]:
    """The rows of each job (unit, arms) in job order; ``workers`` processes (1: in this process)."""
    if workers <= 1:
        own = worker if worker is not None else Worker(config)
        try:
            for key, arms in jobs:
                yield own.run_unit(key, arms)
        finally:
            if worker is None:
                own.close()
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_process, initargs=(config,))
    try:
        # a task's repetitions go to one process together: its caches and attempt memo serve them all
        yield from pool.map(_run_in_process, jobs, chunksize=max(4, config.repeat))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class Tally:
    """Running figures per arm (for the progress bar and the last line)."""

    arms: Sequence[str]
    attempts: Counter[str] = field(default_factory=Counter)
    passed: Counter[str] = field(default_factory=Counter)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)

    def add(self, s: AttemptSummary) -> None:
        self.attempts[s.arm] += 1
        self.passed[s.arm] += int(s.passed)
        self.errors[s.arm] += int(s.system_error)
        self.outcomes.setdefault(s.arm, Counter())[s.outcome or "system_error"] += 1

    def pass1(self, arm: str) -> float:
        return 100.0 * self.passed[arm] / self.attempts[arm] if self.attempts[arm] else 0.0

    def brief(self) -> str:
        return " ".join(f"{a}={self.pass1(a):.1f}%" for a in self.arms)

    def last_line(self) -> str:
        total = sum(self.attempts.values())

        def per(kind: str) -> str:
            return " ".join(f"{a}={self.outcomes.get(a, Counter())[kind]}" for a in self.arms)

        line = (
            f"run: attempts {total} arms {len(self.arms)} pass@1 {self.brief()} "
            f"wrong-commits {per('wrong_commit')} held {per('held')} false-blocks {per('false_block')}"
        )
        if sum(self.errors.values()):
            line += f" system-errors {per('system_error')}"
        return line


def digest_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
