"""One OpenEnv session: a ThinkingBox episode on our environments, the guard in its path.

Each WebSocket session gets a :class:`TBEpisode` (the ``openenv`` server makes one per connection).
``reset(test_uid=..., arm=...)`` opens a fresh isolated environment with the task's patch and, in a
guarded arm, a :class:`~guard.session.GuardSession` with the domain's pack cut to the arm's levers
(as the campaign runner does, :mod:`benchmark.campaign.arms`). Tool calls go through the arm; the
guard's answer (a refusal's hint, a held call) comes back as a ``tool`` observation. At the terminal
step the guarded session is committed (the at-commit checks decide), the judge grades what the arm
let through, and the reward is 1.0 on pass, else 0.0. A session closed before its terminal step (the
socket dropped) is rolled back and its environment freed.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from pydantic import ValidationError

from benchmark.openenv_env._openenv import Environment
from benchmark.openenv_env.models import (
    ACTION_ADAPTER,
    FINISH_REASONS,
    BadInput,
    CallTool,
    CallTools,
    Finish,
    ListTools,
    SubmitMessage,
    TBObservation,
    TBState,
    WireAction,
    reserved,
)
from benchmark.openenv_env.shared import Live, Shared, open_live

log = logging.getLogger("shadowguard.openenv")


class TBEpisode(Environment[WireAction, TBObservation, TBState]):  # type: ignore[misc]
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, shared: Shared) -> None:
        super().__init__()
        self.shared = shared
        self._state = TBState()
        self._live: Live | None = None

    @property
    def state(self) -> TBState:
        return self._state

    # -- reset ------------------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        test_uid: str | None = None,
        arm: str | None = None,
        **kwargs: Any,
    ) -> TBObservation:
        try:
            if kwargs:
                raise BadInput(f"unknown reset parameter(s): {', '.join(sorted(kwargs))}")
            if not test_uid:
                raise BadInput("reset needs a test_uid (one of the benchmark's 507 task ids)")
            task = self.shared.tasks.get(test_uid)
            if task is None:
                raise BadInput(f"unknown test uid {test_uid!r}")
            arm_obj = self.shared.arm(arm)
        except BadInput as exc:
            return self._error(str(exc))
        self._abandon("reset before its terminal step")
        self._live = open_live(self.shared, task, arm_obj, episode_id)
        self._state = TBState(
            episode_id=self._live.episode_id, status="active", test_uid=task.id, arm=arm_obj.name
        )
        return TBObservation(
            kind="reset",
            test_uid=task.id,
            arm=arm_obj.name,
            user_message=task.query,
            instructions=list(self._live.instructions),
        )

    # -- step -------------------------------------------------------------------------------------
    def step(self, action: WireAction, timeout_s: float | None = None, **kwargs: Any) -> TBObservation:
        live = self._live
        if live is None or self._state.status != "active":
            status = self._state.status
            if status in ("done", "error"):
                return self._error(
                    f"the episode is over ({self._state.finish_reason}); reset to start another"
                )
            return self._error("no active episode; reset(test_uid=...) first")
        try:
            parsed = ACTION_ADAPTER.validate_python(action.model_dump(exclude={"metadata"}))
        except ValidationError as exc:
            return self._error(f"malformed action: {_first_errors(exc)}")
        self._state.step_count += 1
        live.steps += 1
        try:
            return self._dispatch(live, parsed)
        except BadInput as exc:
            return self._error(str(exc))
        except Exception as exc:  # an infrastructure failure: the episode ends, reward 0, rolled back
            log.error("episode %s: infrastructure error\n%s", live.episode_id, traceback.format_exc())
            return self._system_error(live, exc)

    def _dispatch(
        self, live: Live, action: ListTools | CallTool | CallTools | SubmitMessage | Finish
    ) -> TBObservation:
        if isinstance(action, ListTools):
            return self._obs(live, kind="tools", tools=live.tool_list())
        if isinstance(action, CallTool):
            self._check_names([action.name])
            out = live.call(action.name, action.arguments, action.call_id)
            return self._obs(live, kind="tool", **out.model_dump())
        if isinstance(action, CallTools):
            self._check_names([c.name for c in action.calls])
            results = [live.call(c.name, c.arguments, c.call_id) for c in action.calls]
            return self._obs(live, kind="tool_batch", results=results)
        if isinstance(action, SubmitMessage):
            return self._submit(live, action.content)
        if action.reason not in FINISH_REASONS:
            raise BadInput(f"unknown finish reason {action.reason!r}; one of {', '.join(FINISH_REASONS)}")
        return self._terminal(live, action.reason)

    def _check_names(self, names: list[str]) -> None:
        bad = [n for n in names if reserved(n)]
        if bad:
            raise BadInput(f"reserved tool name(s) {', '.join(map(repr, bad))}: not callable by an agent")

    def _submit(self, live: Live, content: str) -> TBObservation:
        live.transcript.append({"role": "assistant", "content": content})
        live.final_response = content
        if content.strip().endswith("<DONE>"):
            return self._terminal(live, "done")
        user = self.shared.user
        if user is None or not live.task.user_context:
            return self._terminal(live, "no_user_llm")
        if live.user_turns >= self.shared.max_user_turns:
            return self._terminal(live, "user_limit")
        reply = user.reply(live.task, list(live.transcript))
        if not isinstance(reply, str):
            raise TypeError(f"the user simulator returned {type(reply).__name__}, not a message")
        live.user_turns += 1
        self._state.user_turns = live.user_turns
        live.transcript.append({"role": "user", "content": reply})
        return self._obs(live, kind="user", user_message=reply)

    # -- the end ----------------------------------------------------------------------------------
    def _terminal(self, live: Live, reason: str) -> TBObservation:
        self._state.status = "finalizing"
        facts = live.finish()
        passed, summary = self._grade(live, facts)
        summary["finish_reason"] = reason
        self._end(live, "done", reason)
        return self._obs(
            live,
            kind="terminal",
            done=True,
            reward=1.0 if passed else 0.0,
            finish_reason=reason,
            reward_type="pass" if passed else "fail",
            test_summary=summary,
        )

    def _grade(self, live: Live, facts: dict[str, Any] | None) -> tuple[bool, dict[str, Any]]:
        result, golden = live.result_hash(), live.golden_hash()
        db_pass = result == golden
        summary: dict[str, Any] = {"arm": live.arm.name, "db": "pass" if db_pass else "fail"}
        if not db_pass:
            summary["db_detail"] = f"Database hash {result} does not match golden hash {golden}"
        passed = db_pass
        if live.task.rubrics_yesno:
            passed, summary["rubrics"], answers = self._rubrics(live, db_pass)
            if answers is not None:
                summary["rubric_answers"] = answers
        if facts is not None:
            summary["guard"] = facts
        return passed, summary

    def _rubrics(self, live: Live, db_pass: bool) -> tuple[bool, str, list[dict[str, Any]] | None]:
        """(passed, the summary's ``rubrics`` text, each question's answer when the judge gives them)."""
        if not db_pass:
            return False, "not run: the state check failed", None
        judge = self.shared.judge
        if judge is None:
            return False, "rubric not graded: no judge configured", None
        verdict = judge.grade(live.task, live.final_response or "")
        if verdict is None:
            return False, "rubric not graded: the judge gave no verdict", None
        if isinstance(verdict, bool):
            return verdict, "pass" if verdict else "fail", None
        answers = [{"question": q, "yes": bool(yes)} for q, yes in verdict.answers]
        passed = bool(verdict.passed)
        return passed, "pass" if passed else "fail", answers

    def _system_error(self, live: Live, exc: Exception) -> TBObservation:
        live.discard()
        self._end(live, "error", "system_error")
        return self._obs(
            live,
            kind="terminal",
            done=True,
            reward=0.0,
            finish_reason="system_error",
            reward_type="system_error",
            error=f"{type(exc).__name__}: {exc}",
            test_summary={"arm": live.arm.name, "system_error": f"{type(exc).__name__}: {exc}"},
        )

    def _end(self, live: Live, status: str, reason: str) -> None:
        self._state.status = status  # type: ignore[assignment]
        self._state.finish_reason = reason
        self._live = None

    def _abandon(self, why: str) -> None:
        live = self._live
        if live is None:
            return
        calls = live.discard()
        log.warning(
            "episode %s (%s, arm %s) %s: rolled back, %d call(s) discarded",
            live.episode_id,
            live.task.id,
            live.arm.name,
            why,
            calls,
        )
        self._live = None

    def close(self) -> None:
        """The session ends (client closed or socket dropped): an unfinished episode is rolled back."""
        self._abandon("abandoned by its client")
        self._state.status = "closed"

    # -- observations -----------------------------------------------------------------------------
    def _obs(self, live: Live, **fields: Any) -> TBObservation:
        return TBObservation(test_uid=live.task.id, arm=live.arm.name, steps_taken=live.steps, **fields)

    def _error(self, message: str) -> TBObservation:
        return TBObservation(
            kind="error",
            error=message,
            test_uid=self._state.test_uid,
            arm=self._state.arm,
            steps_taken=self._state.step_count,
        )


def _first_errors(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else err["msg"])
    return "; ".join(parts)
