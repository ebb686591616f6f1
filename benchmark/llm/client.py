"""One role's chat-completions client: the official ``openai`` client, retried with tenacity.

A 429, a 5xx, a timeout or a lost connection is retried with exponential backoff and full jitter (up to
``Endpoint.retries`` times, each wait at most ``Endpoint.backoff_max_s``), as ThinkingBox's LLM client does
(docs/benchmark.md#the-llm-roles). What still fails, and any other refusal of the endpoint (a 4xx), raises
:class:`EndpointError`: the endpoint failed, not the agent, so the runner records the attempt as a system
error (re-run by ``--resume``), never as a task failure.

Every call's tokens go to a :class:`UsageMeter`, tagged with the role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletion
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from benchmark.campaign.results import TokenDetails, Usage
from benchmark.llm.config import Endpoint, Role

RETRIED = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)
"""429, 5xx, and the connection errors (``APITimeoutError`` is one)."""


class EndpointError(RuntimeError):
    """The LLM endpoint failed (after its retries): the attempt is a system error, not a failure."""


@dataclass
class UsageMeter:
    """The tokens of every LLM call of one attempt, in call order, each tagged with its role."""

    calls: list[Usage] = field(default_factory=list)

    def add(self, role: Role, completion: ChatCompletion) -> None:
        usage = completion.usage
        if usage is None:
            self.calls.append(Usage(role=role))  # type: ignore[call-arg]  # extra key, kept by the model
            return
        prompt = usage.prompt_tokens_details
        done = usage.completion_tokens_details
        self.calls.append(
            Usage(
                input_tokens=usage.prompt_tokens,
                input_tokens_details=TokenDetails(cached_tokens=prompt.cached_tokens if prompt else None),
                output_tokens=usage.completion_tokens,
                output_tokens_details=TokenDetails(reasoning_tokens=done.reasoning_tokens if done else None),
                total_tokens=usage.total_tokens,
                role=role,  # type: ignore[call-arg]
            )
        )

    def by_role(self) -> dict[str, dict[str, int]]:
        """``{role: {calls, input_tokens, output_tokens}}`` (for ``metadata.llm_usage``)."""
        out: dict[str, dict[str, int]] = {}
        for usage in self.calls:
            role = str(getattr(usage, "role", "agent"))
            entry = out.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
            entry["calls"] += 1
            entry["input_tokens"] += usage.input_tokens
            entry["output_tokens"] += usage.output_tokens
        return out


def _describe(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"[:500]
    return f"{type(exc).__name__}: {exc}"[:500]


class ChatClient:
    """Chat completions for one role at one endpoint (``complete`` is the only call)."""

    def __init__(self, endpoint: Endpoint, role: Role) -> None:
        self.endpoint = endpoint
        self.role = role
        self._client = openai.OpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key(),
            timeout=endpoint.timeout_s,
            max_retries=0,  # tenacity retries, so the budget and the waits are ours
        )

    def close(self) -> None:
        self._client.close()

    def _retrying(self) -> Retrying:
        def give_up(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            tries = state.attempt_number
            raise EndpointError(
                f"{self.role} endpoint {self.endpoint.base_url} (model {self.endpoint.model}) failed "
                f"after {tries} attempt(s): {_describe(exc) if exc else 'no answer'}"
            ) from exc

        return Retrying(
            retry=retry_if_exception_type(RETRIED),
            stop=stop_after_attempt(self.endpoint.retries + 1),
            wait=wait_random_exponential(multiplier=1, max=self.endpoint.backoff_max_s),
            retry_error_callback=give_up,
            reraise=False,
        )

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        meter: UsageMeter,
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> ChatCompletion:
        """One completion; ``tools`` in the chat-completions ``function`` shape (no parallel calls)."""
        ep = self.endpoint
        kwargs: dict[str, Any] = {
            "model": ep.model,
            "messages": list(messages),
            "temperature": ep.temperature if temperature is None else temperature,
            "max_tokens": ep.max_tokens if max_tokens is None else max_tokens,
        }
        if tools:
            kwargs["tools"] = list(tools)
            kwargs["parallel_tool_calls"] = False
        if ep.seed is not None:
            kwargs["seed"] = ep.seed
        if ep.extra_body:
            kwargs["extra_body"] = dict(ep.extra_body)
        try:
            for attempt in self._retrying():
                with attempt:
                    completion = self._client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:  # not retried: a 4xx, or an answer that is not a completion
            raise EndpointError(
                f"{self.role} endpoint {ep.base_url} (model {ep.model}) refused the request: {_describe(exc)}"
            ) from exc
        completion = cast(ChatCompletion, completion)
        if not completion.choices:
            raise EndpointError(f"{self.role} endpoint {ep.base_url} answered with no choices")
        meter.add(self.role, completion)
        return completion
