"""The campaign runner: agents × arms × repeats over the benchmark tasks, one results row per attempt.

Every attempt gets a fresh isolated environment and, in a guarded arm, its own
:class:`~guard.session.GuardSession` with the domain's pack cut to the arm's levers
(:mod:`benchmark.campaign.arms`). The agent talks to a :class:`~benchmark.campaign.agents.Tools`
surface: straight to the tools (``off``) or through the guard, whose answers are rendered exactly as
the proxy renders them for a production agent. At the end the orchestrator commits a guarded session
(the at-commit checks decide); the judge then grades the state **the arm let through**
(docs/architecture.md#outcomes): for ``off`` everything the tools did, for a guarded arm only what was
committed.

A unit of work is one (task, case, repetition) with all its arms: an agent whose trajectory does not
depend on feedback (oracle, replay) also runs unguarded there, so a guarded failure whose unguarded
twin passes is told apart as a false block. Units are seeded from (seed, uid, case, repetition), so a
subset, a resumed run and every arm of a unit see the same injected faults.

The judge is the benchmark's database check (golden-state hash equality). The 30 rubric tasks' yes/no
rubrics need an LLM judge: an agent that has one (``--agent llm``, its ``grade_rubrics`` hook) grades
them after the database check passed; for the others they are recorded as ``not_judged``.

This module runs units (:class:`Worker`) in this process or a pool of processes (:func:`run_units`);
the contract types are :mod:`benchmark.campaign.run_types`, what a worker loads once
:mod:`benchmark.campaign.loading`, how a guarded attempt ends :mod:`benchmark.campaign.settle`, and the
rows :mod:`benchmark.campaign.rows` (all re-exported here).
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing.util
import os
import random
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmark.campaign.agents import AgentView, NoUser, ToolSpec, Transcript
from benchmark.campaign.arms import ARMS, Arm
from benchmark.campaign.loading import _dataset_root, domain_pack, instructions, make_agent
from benchmark.campaign.memo import AttemptMemo, MemoAgent
from benchmark.campaign.results import GuardFacts
from benchmark.campaign.rows import RUBRICS_NOT_JUDGED, attempt_row, error_row
from benchmark.campaign.run_types import (
    AttemptSummary,
    CampaignConfig,
    Tally,
    UnitKey,
    _Attempt,
    _Judged,
    summary_of,
    unit_seed,
)
from benchmark.campaign.settle import settle
from benchmark.campaign.surfaces import Clocked, DirectTools, GuardedTools
from benchmark.envs import Database, Domain, Environment, load_domain
from benchmark.envs.hashing import StableState, stable_rows, state_delta, state_hash
from benchmark.guarded import GoldenStateCheck, backend_for, executor_for, tool_infos
from benchmark.tasks import BenchData, Task, resolve_data
from guard.approvals.gate import ApprovalGate, policy_version
from guard.approvals.sql import SqlApprovalStore
from guard.classifier import Classifier
from guard.effects import ToolInfo
from guard.faults import FaultInjector, FaultPlan
from guard.policy import PolicyPack
from guard.retry import DEFAULT_BUDGETS, RetryPolicy, VirtualClock
from guard.session import Executor, GuardSession

__all__ = [
    "RUBRICS_NOT_JUDGED",
    "AttemptSummary",
    "CampaignConfig",
    "Tally",
    "UnitKey",
    "Worker",
    "_Attempt",
    "_Judged",
    "_dataset_root",
    "digest_file",
    "domain_pack",
    "instructions",
    "make_agent",
    "run_units",
    "summary_of",
    "unit_seed",
]


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
                out.append(error_row(self.agent, self.config.seed, task, key, arm, seed, got))
            else:
                out.append(attempt_row(self.agent, self.config.seed, task, key, got, seed, twin))
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
        """The agent's run through a guard session cut to ``arm``, then the commit and its facts."""
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
        return transcript, settle(session, tools, gate, self.agent, view, transcript)

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


# -- worker processes -----------------------------------------------------------------------------
_WORKER: Worker | None = None


def _init_process(config: CampaignConfig) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    signal.signal(signal.SIGTERM, _on_terminate)
    global _WORKER
    _WORKER = Worker(config)
    # A pool worker ends with os._exit (no atexit): multiprocessing's exit function runs this, so the
    # worker's servers, temporary approval store and database are released on a normal end too.
    multiprocessing.util.Finalize(None, _close_worker, exitpriority=10)


def _close_worker() -> None:
    """Release what this process's worker holds (at a normal end, or on SIGTERM)."""
    if _WORKER is not None:
        _WORKER.close()


def _on_terminate(signum: int, frame: object) -> None:
    """The main process stops the run (:func:`_stop_pool`): release what the worker holds (its servers
    under ``--through-proxy``, its temporary approval store, its database engine) and exit at once,
    abandoning the unit in flight (the main process no longer waits for its rows)."""
    try:
        _close_worker()
    finally:
        os._exit(128 + signum)


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
            with _interrupt_watch() as interrupt:
                for key, arms in jobs:
                    rows = own.run_unit(key, arms)
                    interrupt.check()
                    yield rows
        finally:
            if worker is None:
                own.close()
        return
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_process, initargs=(config,))
    finished = False
    try:
        # a task's repetitions go to one process together: its caches and attempt memo serve them all
        yield from pool.map(_run_in_process, jobs, chunksize=max(4, config.repeat))
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            _stop_pool(pool)


class _Interrupt:
    """Whether Ctrl-C reached this process during a unit run here."""

    def __init__(self) -> None:
        self.requested = False

    def on_sigint(self, signum: int, frame: object) -> None:
        self.requested = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise :class:`KeyboardInterrupt` if Ctrl-C came during the unit just run, whatever became of
        the exception it raised: one raised inside a SQLite user function (the capture triggers' gate,
        :mod:`guard.sqlite_capture`) reaches the caller as ``OperationalError`` ("user-defined function
        raised exception"), and the attempt would be recorded as an unclassified tool failure. Such a
        unit's rows are dropped: the run stops, and ``--resume`` runs the unit again."""
        if self.requested:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupt_watch() -> Iterator[_Interrupt]:
    """Record Ctrl-C (SIGINT) while units run in this process; the previous handler is restored after.
    Outside the main thread (where no signal handler can be set) Python's default handling stays, and
    a process started with SIGINT ignored (a shell's background job, ``nohup``) keeps ignoring it."""
    interrupt = _Interrupt()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        yield interrupt
        return
    previous = signal.signal(signal.SIGINT, interrupt.on_sigint)
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)


STOP_GRACE_S = 10.0
"""How long a terminated worker may take to release what it holds before it is killed."""


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose results are no longer wanted (Ctrl-C, SIGINT to this process alone, an error in
    the consumer) without waiting for the units in flight, which may run for minutes (a model endpoint
    that does not answer): pending units are cancelled, every worker is sent SIGTERM (it ignores SIGINT,
    and a terminal's Ctrl-C alone would never stop it) and killed if it has not exited after
    :data:`STOP_GRACE_S`; then the pool's own threads are joined. No worker process outlives the call."""
    # the pool's workers: there is no public way to reach them before Python 3.14's terminate_workers()
    processes = list(pool._processes.values()) if pool._processes else []
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.exitcode is None:
            process.kill()
            process.join()
    pool.shutdown(wait=True, cancel_futures=True)


def digest_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
