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
from typing import Any

from benchmark.openenv_env.client import ThinkingBoxEnv
from benchmark.tasks import Task, resolve_data

Row = tuple[str, float | None, dict[str, Any]]


async def oracle_episode(url: str, task: Task, arm: str) -> Row:
    async with ThinkingBoxEnv(base_url=url) as env:
        await env.reset(test_uid=task.id, arm=arm)
        for i, call in enumerate(task.answer.golden_tool_interactions):
            await env.call_tool(call.tool, call.parameters, call_id=f"call_{i}")
        result = await env.finish()
        return task.id, result.reward, result.observation.test_summary or {}


async def run_oracle(url: str, tasks: Sequence[Task], arm: str, concurrency: int) -> list[Row]:
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Row:
        async with gate:
            return await oracle_episode(url, task, arm)

    return await asyncio.gather(*(one(t) for t in tasks))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True)
    parser.add_argument("--arm", default="guard")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--data", default=None)
    parser.add_argument("--domain", action="append", help="only these domains (repeatable)")
    args = parser.parse_args(argv)
    tasks = resolve_data(args.data).tasks(args.domain)
    started = time.perf_counter()
    rows = asyncio.run(run_oracle(args.url, tasks, args.arm, args.concurrency))
    seconds = time.perf_counter() - started
    passed = sum(1 for _, r, _ in rows if r == 1.0)
    db = sum(1 for _, _, summary in rows if summary.get("db") == "pass")
    rubrics = Counter(str(summary["rubrics"]) for _, _, summary in rows if "rubrics" in summary)
    print(f"oracle via OpenEnv, arm {args.arm}: reward 1.0 on {passed}/{len(rows)}")
    print(f"  state check passed on {db}/{len(rows)}; rubric tasks: {dict(rubrics)}")
    print(f"  {len(rows)} episodes in {seconds:.1f} s at concurrency {args.concurrency}")
    for uid, reward, summary in rows:
        if reward != 1.0 and "rubrics" not in summary:
            print(f"  not passed: {uid} {summary}")
    return 0 if db == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
