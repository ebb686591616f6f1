"""The environment server a ``--through-proxy`` campaign puts behind ``shadowguard serve``.

It is ``shadowguard env serve`` (:class:`~benchmark.envs.server.EnvServer`: the same tools, sessions,
harness methods and transaction extension, both eras) with two more harness methods, because the proxy
names its upstream sessions itself (``sg-<random>``), so the campaign cannot initialise or read them
by name:

``shadowguard/bench/stage {"task_id"}``  sessions created from now on start from that task's data patch
                                          (instead of the defaults only); answers the initial state hash.
``shadowguard/bench/take {}``            the state hash of the last session created since the stage
                                          (the initial hash when none was), and closes the sessions
                                          created since.

One attempt at a time per server (a campaign worker owns its servers), so "the session created since
the stage" is the attempt's. Like every harness method these are JSON-RPC methods outside the tool
namespace: the agent cannot reach them, and the proxy does not relay them.

Run: ``python -m benchmark.llm.staged_env --domain D [--data P] [--db URL]`` (HTTP on a free port,
announced on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, Literal

import anyio.to_thread
import mcp.types as types
from mcp import ClientSession
from pydantic import Field

from benchmark.envs import Database, Environment, load_domain
from benchmark.envs.server import (
    Ctx,
    EnvInitParams,
    EnvServer,
    EnvSession,
    EnvSessionParams,
    EnvSessions,
    EnvStateResult,
)
from benchmark.tasks import resolve_data

STAGE_METHOD = "shadowguard/bench/stage"
TAKE_METHOD = "shadowguard/bench/take"
ANNOUNCE = "staged env serve: listening on"


class TakeResult(types.Result):
    session: str | None = Field(default=None)
    state_hash: str = Field(alias="state_hash")


class StageRequest(types.Request[EnvInitParams, Literal["shadowguard/bench/stage"]]):
    method: Literal["shadowguard/bench/stage"] = "shadowguard/bench/stage"
    params: EnvInitParams


class TakeRequest(types.Request[EnvSessionParams, Literal["shadowguard/bench/take"]]):
    method: Literal["shadowguard/bench/take"] = "shadowguard/bench/take"
    params: EnvSessionParams = Field(default_factory=EnvSessionParams)


class StagedSessions(EnvSessions):
    """Sessions whose environments start from the staged patch; remembers which were created."""

    staged: Mapping[str, Any] | None = None
    created: list[str]

    def _environment(self, s: EnvSession) -> Environment:
        if s.env is None:
            s.env = self.open_environment(self.staged)
            self.created.append(s.key)
        return s.env


class StagedEnvServer(EnvServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        old = self.sessions
        self.sessions = StagedSessions(
            old.domain, old.database, idle_timeout=old.idle_timeout, max_sessions=old.max_sessions
        )
        self.sessions.created = []
        self._initial = ""
        self.server.add_request_handler(STAGE_METHOD, EnvInitParams, self._stage)
        self.server.add_request_handler(TAKE_METHOD, EnvSessionParams, self._take)

    async def _stage(self, ctx: Ctx, params: EnvInitParams) -> EnvStateResult:
        patch = await self._patch_for(params)

        def initial() -> str:
            env = self.sessions.open_environment(patch)
            try:
                return env.state_hash()
            finally:
                env.close()

        self._initial = await anyio.to_thread.run_sync(initial)
        assert isinstance(self.sessions, StagedSessions)
        self.sessions.staged = patch
        self.sessions.created = []
        return EnvStateResult(state_hash=self._initial)

    async def _take(self, ctx: Ctx, params: EnvSessionParams) -> TakeResult:
        assert isinstance(self.sessions, StagedSessions)
        created, self.sessions.created = self.sessions.created, []
        if not created:
            return TakeResult(session=None, state_hash=self._initial)
        digest = await self.sessions.state_hash(created[-1])
        for key in created:
            await self.sessions.close(key)
        return TakeResult(session=created[-1], state_hash=digest)


async def stage(session: ClientSession, task_id: str) -> str:
    request = StageRequest(params=EnvInitParams.model_validate({"task_id": task_id}))
    return (await session.send_request(request, EnvStateResult)).state_hash


async def take(session: ClientSession) -> TakeResult:
    return await session.send_request(TakeRequest(params=EnvSessionParams.model_validate({})), TakeResult)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.llm.staged_env", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--domain", required=True)
    parser.add_argument("--data", default=None)
    parser.add_argument("--db", default=None)
    args = parser.parse_args(argv)
    bench = resolve_data(args.data)
    database = Database(args.db)
    server = StagedEnvServer(load_domain(args.domain, bench.bundle), database, bench)
    try:
        server.serve_http(
            "127.0.0.1", 0, announce=lambda url: print(f"{ANNOUNCE} {url}", file=sys.stderr, flush=True)
        )
    finally:
        database.dispose()


if __name__ == "__main__":
    main()
