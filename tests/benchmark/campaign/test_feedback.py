"""The feedback kind an agent meets in each arm is read from the real outcome of the call.

One retail ``create_rma`` call (the golden calls before it replayed) through every arm's real tool
surface — ``DirectTools`` for ``off``, a real GuardSession with the pack cut to the arm's levers and the
runner's retry budgets otherwise — in three ways a wrong agent or a flaky upstream gets it wrong. The
arms differ exactly where their levers differ; every guarded arm answers a failed call with the
guard's classification and next step (the shared base, ``base`` arm), which ``off`` does not.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from benchmark.campaign.agents import ToolReply, Tools
from benchmark.campaign.arms import ARMS
from benchmark.campaign.simulated import OneShotFault, feedback_kind
from benchmark.campaign.surfaces import DirectTools, GuardedTools
from benchmark.envs import Database, Domain, Environment
from benchmark.guarded import backend_for, executor_for, load_domain_policy, tool_infos
from benchmark.tasks import Task
from guard.policy import PolicyPack
from guard.retry import DEFAULT_BUDGETS, RetryPolicy, VirtualClock
from guard.session import Executor, GuardSession

PACK = Path(__file__).resolve().parents[3] / "policies" / "sandbox_external_retail" / "policy.yaml"
ARM_NAMES = [a for a in ARMS if a != "oracle-ceiling"]


@pytest.fixture(scope="module")
def pack(retail: Domain) -> PolicyPack:
    return load_domain_policy(PACK, retail)


def _reply(
    retail: Domain, pack: PolicyPack, task: Task, arm: str, args: dict[str, Any], fault: str | None
) -> ToolReply:
    golden = task.answer.golden_tool_interactions
    index = next(i for i, c in enumerate(golden) if c.tool == "create_rma")
    with Environment(retail, Database()) as env:
        env.apply_patch(task.data_patch)
        execute: Executor = executor_for(env)
        if fault is not None:
            execute = OneShotFault(execute, golden[index], 1, fault, seed=3)
        tools: Tools
        if not ARMS[arm].guarded:
            tools = DirectTools(execute)
        else:
            budgets = dict(DEFAULT_BUDGETS) if ARMS[arm].has("retries") else {}
            retry = RetryPolicy(budgets=budgets, clock=VirtualClock(), rng=random.Random(1))
            cut = ARMS[arm].pack(pack)
            session = GuardSession(
                backend_for(env), execute, tool_infos(env), cut, session_id="t", retry=retry
            )
            tools = GuardedTools(session, "none", None)
        for call in golden[:index]:
            assert tools.call(call.tool, call.parameters).feedback is None
        reply = tools.call("create_rma", {**golden[index].parameters, **args})
    assert feedback_kind(reply) == reply.feedback
    return reply


@pytest.mark.parametrize(
    ("case", "args", "fault", "expected"),
    [
        (
            "a fee in words",
            {"removal_fee": "0 dollars"},
            None,
            # the tool's own validation error: raw in off, classified in every guarded arm; the
            # validation lever refuses it before it is sent, the checks cannot check it
            {
                "off": (None, "raw_error"),
                "validation": ("refused", "classified_hint"),
                "checks": ("refused", "classified_hint"),
                "guard": ("refused", "classified_hint"),
            },
        ),
        (
            "a refused connection",
            {},
            "refused",
            # only the retries lever re-sends it (the guard then holds the rehearsed call for review)
            {"off": (None, "raw_error"), "retries": ("allowed", None), "guard": ("held", "held")},
        ),
        (
            "a refund that breaks the policy",
            {"refund_amount_delta": 10},
            None,
            {
                "off": (None, None),
                "checks": ("refused", "policy_violation"),
                "approvals": ("held", "held"),
                "guard": ("refused", "policy_violation"),
            },
        ),
    ],
)
def test_each_arm_answers_with_the_feedback_of_its_real_outcome(
    retail: Domain,
    pack: PolicyPack,
    retail_tasks: list[Task],
    case: str,
    args: dict[str, Any],
    fault: str | None,
    expected: dict[str, tuple[str | None, str | None]],
) -> None:
    task = next(
        t for t in retail_tasks if any(c.tool == "create_rma" for c in t.answer.golden_tool_interactions)
    )
    if "refund_amount_delta" in args:
        golden = next(c for c in task.answer.golden_tool_interactions if c.tool == "create_rma")
        args = {"refund_amount": golden.parameters["refund_amount"] + args["refund_amount_delta"]}
    failed_default = ("allowed", None) if case.startswith("a refund") else ("failed", "classified_hint")
    for arm in ARM_NAMES:
        reply = _reply(retail, pack, task, arm, args, fault)
        assert (reply.guard, reply.feedback) == expected.get(arm, failed_default), (case, arm, reply.text)
