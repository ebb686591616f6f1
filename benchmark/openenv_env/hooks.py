"""The two seams an LLM plugs into: the simulated user and the rubric judge.

The OpenEnv server does not talk to an LLM itself; an implementation of these protocols does (the
LLM agent work provides both over OpenAI-compatible endpoints: ``--llm-config``,
:mod:`benchmark.openenv_env.llm_hooks`). Without a user simulator an
episode that needs a user reply ends with ThinkingBox's ``no_user_llm``; without a judge a rubric
task is reported "rubric not graded" and never passes.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from benchmark.tasks import Task


@runtime_checkable
class UserSimulator(Protocol):
    def reply(self, task: Task, transcript: Sequence[dict[str, Any]]) -> str:
        """The user's next message. ``transcript`` is the episode so far as chat messages
        (``{"role": "user"|"assistant"|"tool", "content": ...}``); the task's ``user_context`` is the
        simulator's private context."""
        ...


class Graded(Protocol):
    """A judge's detailed grade (e.g. :class:`benchmark.llm.judge.RubricGrade`)."""

    @property
    def passed(self) -> bool: ...

    @property
    def answers(self) -> Sequence[tuple[str, bool]]:
        """(question, answered Yes) per rubric."""
        ...


@runtime_checkable
class RubricJudge(Protocol):
    def grade(self, task: Task, final_response: str) -> bool | Graded | None:
        """Every yes/no rubric of ``task`` answered Yes on the agent's final message (a bool, or a
        :class:`Graded` with each question's answer); None when the judge could not grade (reported
        as "rubric not graded", never a pass)."""
        ...


class HookError(ValueError):
    pass


def load_hook(spec: str, protocol: type[Any]) -> Any:
    """``module:attribute`` -> the object (a class or factory is called with no arguments), checked
    against ``protocol``."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise HookError(f"{spec!r}: expected MODULE:ATTRIBUTE")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HookError(f"{spec!r}: cannot import {module_name}: {exc}") from exc
    target = getattr(module, attribute, None)
    if target is None:
        raise HookError(f"{spec!r}: {module_name} has no attribute {attribute}")
    if isinstance(target, type) or not isinstance(target, protocol):
        try:
            target = target()
        except TypeError as exc:
            raise HookError(f"{spec!r}: cannot be made without arguments: {exc}") from exc
    obj = target
    if not isinstance(obj, protocol):
        raise HookError(f"{spec!r}: the object does not implement {protocol.__name__}")
    return obj
