"""The oracle through the OpenEnv client: every task's golden calls as actions, then ``finish``.

Benchmark-internal (the client reads the answer key; the server and its guard never do): the
acceptance check that the served episodes grade the golden trajectories as passes in every arm::

    python -m benchmark.openenv_env.oracle --url ws://127.0.0.1:8000 --arm guard --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Sequence

from benchmark.openenv_env.client import ThinkingBoxEnv
from benchmark.tasks import Task, resolve_data


async def oracle_episode(url: str, task: Task, arm: str) -> tuple[str, float | None, str | None]:
    async with ThinkingBoxEnv(base_url=url) as env:
        await env.reset(test_uid=task.id, arm=arm)
        for i, call in enumerate(task.answer.golden_tool_interactions):
            await env.call_tool(call.tool, call.parameters, call_id=f"call_{i}")
        result = await env.finish()
        return task.id, result.reward, result.observation.reward_type


async def run_oracle(
    url: str, tasks: Sequence[Task], arm: str, concurrency: int
) -> list[tuple[str, float | None, str | None]]:
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> tuple[str, float | None, str | None]:
        async with gate:
            return await oracle_episode(url, task, arm)

    return await asyncio.gather(*(one(t) for t in tasks))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True)
    parser.add_argument("--arm", default="guard")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--data", default=None)
    args = parser.parse_args(argv)
    tasks = resolve_data(args.data).tasks()
    started = time.perf_counter()
    rows = asyncio.run(run_oracle(args.url, tasks, args.arm, args.concurrency))
    seconds = time.perf_counter() - started
    rewards = Counter(r for _, r, _ in rows)
    kinds = Counter(k for _, _, k in rows)
    passed = sum(1 for _, r, _ in rows if r == 1.0)
    print(f"oracle via OpenEnv, arm {args.arm}: reward 1.0 on {passed}/{len(rows)}; {dict(kinds)}")
    print(
        f"  {len(rows)} episodes in {seconds:.1f} s at concurrency {args.concurrency}; "
        f"rewards {dict(rewards)}"
    )
    for uid, reward, kind in rows:
        if reward != 1.0:
            print(f"  not passed: {uid} ({kind})")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
