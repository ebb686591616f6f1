"""The user-simulator and judge seams of the OpenEnv episode, in process (the WebSocket path is
tests/benchmark/test_openenv.py): user turns, limits, the judge at the end, a failing simulator."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from benchmark.envs import Database
from benchmark.openenv_env.episode import TBEpisode
from benchmark.openenv_env.hooks import HookError, RubricJudge, UserSimulator, load_hook
from benchmark.openenv_env.models import TBObservation, WireAction
from benchmark.openenv_env.shared import Shared
from benchmark.tasks import Task, resolve_data

BOOKING = "external_booking_v1"


class ScriptedUser:
    """A test double: answers with a fixed line naming the turn; raises when told to."""

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []
        self.fail = False

    def reply(self, task: Task, transcript: Sequence[dict[str, Any]]) -> str:
        if self.fail:
            raise ConnectionError("user endpoint unreachable")
        self.seen.append(list(transcript))
        return f"(scripted user, turn {len(self.seen)}) please go on"


class ScriptedJudge:
    def __init__(self) -> None:
        self.verdict: bool | None = True
        self.graded: list[str] = []

    def grade(self, task: Task, final_response: str) -> bool | None:
        self.graded.append(final_response)
        return self.verdict


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    s = Shared(
        resolve_data(),
        Database(),
        user=ScriptedUser(),
        judge=ScriptedJudge(),
        max_user_turns=2,
        domains_served=(BOOKING,),
    )
    s.warm()
    yield s
    s.close()


def act(episode: TBEpisode, **action: Any) -> TBObservation:
    return episode.step(WireAction(**action))


def play_golden(episode: TBEpisode, task: Task) -> None:
    for call in task.answer.golden_tool_interactions:
        obs = act(episode, type="call_tool", name=call.tool, arguments=call.parameters)
        assert obs.kind == "tool", obs.error


def golden_episode(shared: Shared, arm: str, *, rubrics: bool) -> tuple[TBEpisode, Task]:
    """A fresh episode on the first task that has (``rubrics``) or lacks yes/no rubrics, reset on
    ``arm``, after the task's golden tool calls (each must succeed)."""
    task = next(t for t in shared.tasks.values() if bool(t.rubrics_yesno) == rubrics)
    episode = TBEpisode(shared)
    assert episode.reset(test_uid=task.id, arm=arm).kind == "reset"
    play_golden(episode, task)
    return episode, task


def test_user_turns_then_judge_on_done(shared: Shared) -> None:
    episode, task = golden_episode(shared, "guard", rubrics=True)
    obs = act(episode, type="submit_message", content="Is there anything else?")
    assert (obs.kind, obs.user_message, obs.done) == ("user", "(scripted user, turn 1) please go on", False)
    user = shared.user
    assert isinstance(user, ScriptedUser) and user.seen[-1][0] == {"role": "user", "content": task.query}
    assert episode.state.user_turns == 1
    final = act(episode, type="submit_message", content="All set. <DONE>")
    assert (final.kind, final.reward, final.finish_reason) == ("terminal", 1.0, "done")
    assert final.test_summary is not None and final.test_summary["rubrics"] == "pass"
    judge = shared.judge
    assert isinstance(judge, ScriptedJudge) and judge.graded[-1] == "All set. <DONE>"


def test_judge_without_verdict_and_user_limit(shared: Shared, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(shared.judge, ScriptedJudge)
    monkeypatch.setattr(shared.judge, "verdict", None)
    episode, _ = golden_episode(shared, "off", rubrics=True)
    for _ in range(2):
        assert act(episode, type="submit_message", content="More?").kind == "user"
    final = act(episode, type="submit_message", content="More?")
    assert (final.finish_reason, final.reward) == ("user_limit", 0.0)
    assert final.test_summary is not None
    assert final.test_summary["rubrics"] == "rubric not graded: the judge gave no verdict"


def test_failing_user_simulator_is_a_system_error_rolled_back(
    shared: Shared, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(shared.user, ScriptedUser)
    monkeypatch.setattr(shared.user, "fail", True)
    episode, _ = golden_episode(shared, "guard", rubrics=False)
    final = act(episode, type="submit_message", content="Anything else?")
    assert (final.kind, final.reward, final.reward_type) == ("terminal", 0.0, "system_error")
    assert final.error == "ConnectionError: user endpoint unreachable"
    assert episode.state.status == "error"
    assert act(episode, type="list_tools").kind == "error"


def test_load_hook() -> None:
    user = load_hook(f"{__name__}:ScriptedUser", UserSimulator)
    assert isinstance(user, ScriptedUser)
    assert isinstance(load_hook(f"{__name__}:ScriptedJudge", RubricJudge), ScriptedJudge)
    with pytest.raises(HookError, match="expected MODULE:ATTRIBUTE"):
        load_hook("nocolon", UserSimulator)
    with pytest.raises(HookError, match="has no attribute Missing"):
        load_hook(f"{__name__}:Missing", UserSimulator)
    with pytest.raises(HookError, match="does not implement UserSimulator"):
        load_hook(f"{__name__}:ScriptedJudge", UserSimulator)
