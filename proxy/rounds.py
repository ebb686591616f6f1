"""An upstream's requests to the client, relayed to a 2026-07-28 agent as input rounds.

The 2026-07-28 era has no server-to-client requests: a server that needs the client's input
answers the request with an ``InputRequiredResult`` (its ``input_requests``) and the client sends
the request again with its answers (``input_responses``) and the echoed ``request_state``. An
upstream asks the proxy while a guarded call is running in it (a handshake-era request, or a
2026-07-28 round the proxy's upstream client drives), and that call cannot be ended and resumed.
So the proxy keeps the call running and *parks* it:

1. the agent's ``tools/call`` starts the call in the background (:meth:`Rounds.start`);
2. when the upstream asks for input, the agent's request is answered with an ``InputRequiredResult``
   carrying that request and ``request_state = "relay:<token>"`` (a random 128-bit token);
3. the agent's retry (same tool and arguments, that state) hands its answers to the waiting
   upstream request and waits for the next round or the call's result (:meth:`Rounds.resume`).

The token is the only key to a parked call; a round the agent does not answer within
``ROUND_TIMEOUT_S`` is answered for it with an error (the upstream decides what that means), and
the call goes on to its end. The guard's own input rounds (approvals, ``approval:`` states) are
not touched.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
from mcp import MCPError
from mcp.server.context import HandlerResult

logger = logging.getLogger(__name__)

STATE_PREFIX = "relay:"
ROUND_TIMEOUT_S = 120.0
"""How long a parked call waits for the agent's answers (and an agent request for the next round)."""


@dataclass
class _Parked:
    """One guarded call of a 2026-07-28 agent that may need the agent's input on the way."""

    tool: Any
    arguments: Any
    """The call's ``name`` and ``arguments`` as sent (not yet validated): a retry must repeat them."""
    asked: dict[str, tuple[Any, anyio.Event]] = field(default_factory=dict)
    """Open input requests by key: the request and the event set when its answer arrived."""
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    result: HandlerResult = None
    error: BaseException | None = None
    done: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """The background call's: cancelled when the agent abandons its request while no round is out."""

    def poke(self) -> None:
        self.changed.set()


class Rounds:
    """The parked calls of this proxy (see the module docstring)."""

    def __init__(self) -> None:
        self._parked: dict[str, _Parked] = {}
        self._by_request: dict[int, _Parked] = {}
        self._task_group: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the background calls until cancelled."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_status.started()
            await anyio.sleep_forever()

    @staticmethod
    def is_resume(params: Mapping[str, Any] | None) -> bool:
        state = (params or {}).get("requestState")
        return isinstance(state, str) and state.startswith(STATE_PREFIX)

    async def start(self, ctx: Any, call: Callable[[], Awaitable[HandlerResult]]) -> HandlerResult:
        """Run ``call`` (the rest of the agent's ``tools/call``) in the background; return its
        result, or the first input round it needs."""
        if self._task_group is None:
            return await call()
        params: Mapping[str, Any] = ctx.params or {}
        parked = _Parked(tool=params.get("name"), arguments=params.get("arguments"))
        self._by_request[id(ctx)] = parked

        async def background() -> None:
            try:
                with parked.scope:
                    parked.result = await call()
                if parked.scope.cancelled_caught:
                    parked.error = MCPError(
                        code=types.REQUEST_TIMEOUT, message="the agent abandoned the call"
                    )
            except Exception as exc:
                parked.error = exc
            finally:
                parked.done = True
                self._by_request.pop(id(ctx), None)
                parked.poke()

        self._task_group.start_soon(background)
        return await self._next(parked)

    async def resume(self, params: Mapping[str, Any]) -> HandlerResult:
        """The agent's retry of a parked call: hand over its answers, wait for what comes next."""
        token = str(params.get("requestState", "")).removeprefix(STATE_PREFIX)
        parked = self._parked.pop(token, None)
        if parked is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="Unknown or expired requestState: no call of this proxy waits for these answers",
            )
        if params.get("name") != parked.tool or params.get("arguments") != parked.arguments:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="requestState belongs to a call of another tool or with other arguments",
            )
        responses: Mapping[str, Any] = params.get("inputResponses") or {}
        for key, (_, answered) in list(parked.asked.items()):
            if key in responses:
                parked.answers[key] = responses[key]
                del parked.asked[key]
                answered.set()
        return await self._next(parked)

    async def ask(self, ctx: Any, request: Any) -> dict[str, Any] | types.ErrorData | None:
        """An upstream's request for the agent of ``ctx``: its answer (wire JSON), an
        :class:`~mcp.types.ErrorData` if it gave none in time, or None if ``ctx`` is no parked call."""
        parked = self._by_request.get(id(ctx))
        if parked is None:
            return None
        key = f"r{secrets.token_hex(4)}"
        answered = anyio.Event()
        parked.asked[key] = (request, answered)
        parked.poke()
        with anyio.move_on_after(ROUND_TIMEOUT_S):
            await answered.wait()
            return parked.answers.pop(key)
        parked.asked.pop(key, None)
        return types.ErrorData(
            code=types.REQUEST_TIMEOUT,
            message=f"the agent did not answer {request.method} within {ROUND_TIMEOUT_S:g} s",
        )

    async def _next(self, parked: _Parked) -> HandlerResult:
        try:
            while not parked.done and not parked.asked:
                await parked.changed.wait()
                parked.changed = anyio.Event()
        except anyio.get_cancelled_exc_class():
            parked.scope.cancel()
            raise
        if parked.asked:
            token = secrets.token_hex(16)
            self._parked[token] = parked
            return types.InputRequiredResult(
                input_requests={key: request for key, (request, _) in parked.asked.items()},
                request_state=STATE_PREFIX + token,
            )
        if parked.error is not None:
            raise parked.error
        return parked.result


__all__ = ["ROUND_TIMEOUT_S", "STATE_PREFIX", "Rounds"]
