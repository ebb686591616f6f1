"""Attempts that are the same attempt, run once: the campaign runner's memo for a deterministic agent.

An attempt is a function of the task, the arm, what the agent plays and the decisions it takes on
feedback; the environment is fresh every time. An agent whose plan is a pure function of its view (the
simulated agent) names that plan with :meth:`MemoAgent.memo_key`, and records the decisions it took
(each a query — what it was asked to decide, where — and the answer). Another attempt with the same key
is the same attempt if the agent, asked the same queries under its own seed, answers them the same:
then each query it would meet is the one recorded (the path up to it is the same), so its transcript,
verdicts, commit and judged state are those recorded. It is taken from the memo instead of being
replayed against a real environment and a real guard session.

What may differ between such attempts is only what the runner adds per row (repetition, seeds), so a
results file is byte-identical with and without the memo (tested). An agent returns no key for a plan
whose upstream depends on the attempt's seed in a way the key does not hold.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol, runtime_checkable

from benchmark.campaign.agents import AgentView

Decision = tuple[Hashable, bool]
"""(the query the agent decided, its answer)."""


@runtime_checkable
class MemoAgent(Protocol):
    def memo_key(self, view: AgentView, arm: str) -> Hashable | None:
        """The attempt's plan on ``arm`` (None: do not memoize this attempt)."""

    def decisions(self) -> Sequence[Decision]:
        """The decisions of the attempt just run, in order."""

    def replays(self, view: AgentView, decisions: Sequence[Decision]) -> bool:
        """Whether, for ``view``'s seed, the agent answers every recorded query as recorded."""


class AttemptMemo:
    """Recorded attempts per key, for the ``tasks`` most recent tasks (units run task by task)."""

    def __init__(self, tasks: int = 4) -> None:
        self._tasks = tasks
        self._by_task: dict[str, dict[Hashable, list[tuple[tuple[Decision, ...], Any]]]] = {}
        self.hits = 0
        self.runs = 0

    def find(self, agent: MemoAgent, view: AgentView, key: Hashable) -> Any | None:
        for decisions, attempt in self._by_task.get(view.uid, {}).get(key, ()):
            if agent.replays(view, decisions):
                self.hits += 1
                return attempt
        return None

    def add(self, agent: MemoAgent, view: AgentView, key: Hashable, attempt: Any) -> None:
        self.runs += 1
        if view.uid not in self._by_task:
            while len(self._by_task) >= self._tasks:
                del self._by_task[next(iter(self._by_task))]
            self._by_task[view.uid] = {}
        self._by_task[view.uid].setdefault(key, []).append((tuple(agent.decisions()), attempt))
