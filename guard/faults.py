"""Seeded fault injection for executors: the upstream misbehaving the way production upstreams do.

:class:`FaultInjector` wraps an executor (``(tool, arguments) -> ToolResult``). For every forwarded
call it draws at most one fault from a :class:`FaultPlan` with a seeded random source, so a run is
reproducible. Kinds, whether the upstream *ran* the call before the fault, and what is raised (the
exceptions the real clients raise, so the classifier is exercised on real types):

    kind      ran?  raised
    timeout   yes   httpx2.ReadTimeout | mcp MCPError(-32001) | TimeoutError
    drop      yes   httpx2.RemoteProtocolError | mcp MCPError(-32000) | ConnectionResetError
    refused   no    httpx2.ConnectError | ConnectionRefusedError
    5xx       yes   httpx2.HTTPStatusError 500 / 502 / 504 (worst case: the work was done)
    503       no    httpx2.HTTPStatusError 503 with Retry-After
    429       no    httpx2.HTTPStatusError 429 with Retry-After
    slow      yes   nothing: the answer comes ``slow_s`` late (a timeout if that passes ``timeout_s``)

``transient=R`` spreads rate R evenly over timeout, drop, refused, 5xx and 503. A fault after the
call ran is the dangerous case for writes: the effect exists, the caller is told it failed. Time is
taken from a :class:`~guard.retry.Clock`; with a :class:`~guard.retry.VirtualClock` timeouts and slow
answers cost no real time.

Spec syntax (``--faults``): ``transient=0.2,429=0.05,slow=0.1`` — kind=rate pairs, rates in [0, 1]
summing to at most 1.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import MCPError

from guard.retry import Clock, SystemClock
from guard.session import Executor, ToolResult

KINDS = ("timeout", "drop", "refused", "5xx", "503", "429", "slow")
TRANSIENT = ("timeout", "drop", "refused", "5xx", "503")
RAN_BEFORE_FAULT = frozenset({"timeout", "drop", "5xx", "slow"})
_URL = "http://upstream.invalid/mcp"


class FaultSpecError(ValueError):
    """A ``--faults`` spec that cannot be used; the message says which part and why."""


@dataclass(frozen=True)
class FaultPlan:
    """Rates per fault kind (probability per forwarded call) and the shape of the faults."""

    rates: Mapping[str, float]
    seed: int = 0
    retry_after: float = 1.0
    """Seconds announced in Retry-After by 429 and 503."""
    slow_s: float = 2.0
    timeout_s: float = 5.0
    """How long a timeout takes, and the longest answer that is not one."""

    def __post_init__(self) -> None:
        for kind, rate in self.rates.items():
            if kind not in KINDS:
                raise FaultSpecError(
                    f"unknown fault kind {kind!r}; use transient or one of {', '.join(KINDS)}"
                )
            if not 0.0 <= rate <= 1.0:
                raise FaultSpecError(f"rate of {kind} must be between 0 and 1, not {rate}")
        if sum(self.rates.values()) > 1.0 + 1e-9:
            raise FaultSpecError(f"fault rates add up to {sum(self.rates.values()):g}, more than 1")

    @classmethod
    def parse(cls, spec: str, *, seed: int = 0, **shape: float) -> FaultPlan:
        """``transient=0.2,429=0.05`` -> a plan (``transient`` is spread over its five kinds)."""
        rates: dict[str, float] = {}
        named: set[str] = set()
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            kind, sep, value = part.partition("=")
            kind = kind.strip()
            if not sep:
                raise FaultSpecError(f"{part!r}: expected kind=rate, e.g. transient=0.2")
            if kind in named:
                raise FaultSpecError(f"{kind!r} is given twice")
            named.add(kind)
            try:
                rate = float(value)
            except ValueError:
                raise FaultSpecError(f"{part!r}: rate {value.strip()!r} is not a number") from None
            if kind == "transient":
                if not 0.0 <= rate <= 1.0:
                    raise FaultSpecError(f"rate of transient must be between 0 and 1, not {rate}")
                for each in TRANSIENT:
                    rates[each] = rates.get(each, 0.0) + rate / len(TRANSIENT)
            elif kind in KINDS:
                rates[kind] = rates.get(kind, 0.0) + rate
            else:
                raise FaultSpecError(
                    f"unknown fault kind {kind!r}; use transient or one of {', '.join(KINDS)}"
                )
        if not rates:
            raise FaultSpecError("empty fault spec; e.g. transient=0.2")
        return cls(rates=rates, seed=seed, **shape)

    def describe(self) -> str:
        return ",".join(f"{k}={self.rates[k]:g}" for k in KINDS if self.rates.get(k))


@dataclass(frozen=True)
class InjectedFault:
    tool: str
    kind: str
    ran: bool
    """Whether the upstream ran the call before the fault (its effects exist)."""


def _status_error(status: int, retry_after: float | None) -> httpx2.HTTPStatusError:
    request = httpx2.Request("POST", _URL)
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    response = httpx2.Response(status, headers=headers, request=request)
    return httpx2.HTTPStatusError(
        f"Server error '{status} {response.reason_phrase}' for url '{_URL}'",
        request=request,
        response=response,
    )


@dataclass
class FaultInjector:
    """An executor that forwards to ``execute`` and injects the plan's faults (see module docstring)."""

    execute: Executor
    plan: FaultPlan
    clock: Clock = field(default_factory=SystemClock)
    rng: random.Random | None = None
    injected: list[InjectedFault] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.rng is None:
            self.rng = random.Random(self.plan.seed)  # noqa: S311 - reproducible faults, not secrets

    @property
    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.injected)

    def _draw(self) -> str | None:
        assert self.rng is not None
        u = self.rng.random()
        edge = 0.0
        for kind in KINDS:
            edge += self.plan.rates.get(kind, 0.0)
            if u < edge:
                return kind
        return None

    def __call__(self, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        assert self.rng is not None
        kind = self._draw()
        if kind is None:
            return self.execute(tool, arguments)
        self.injected.append(InjectedFault(tool, kind, kind in RAN_BEFORE_FAULT))
        if kind == "refused":
            raise self.rng.choice(
                [
                    httpx2.ConnectError("[Errno 111] Connection refused"),
                    ConnectionRefusedError(111, "Connection refused"),
                ]
            )
        if kind in ("429", "503"):
            raise _status_error(int(kind), self.plan.retry_after)
        if kind == "slow" and self.plan.slow_s <= self.plan.timeout_s:
            self.clock.sleep(self.plan.slow_s)
            return self.execute(tool, arguments)
        self.execute(tool, arguments)
        if kind in ("timeout", "slow"):
            self.clock.sleep(self.plan.timeout_s)
            raise self.rng.choice(
                [
                    httpx2.ReadTimeout("timed out"),
                    MCPError(-32001, "Request timed out"),
                    TimeoutError("timed out"),
                ]
            )
        if kind == "drop":
            raise self.rng.choice(
                [
                    httpx2.RemoteProtocolError("Server disconnected without sending a response."),
                    MCPError(-32000, "Connection closed"),
                    ConnectionResetError(104, "Connection reset by peer"),
                ]
            )
        raise _status_error(self.rng.choice([500, 502, 504]), None)
