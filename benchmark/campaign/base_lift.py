"""The base every guarded arm shares, stated wherever a lift against ``off`` is printed.

Every guarded arm answers a failed call with the guard's classification and what to do next (the
GuardSession does so for every outcome that is not allowed; see ``arms.py``); ``off`` shows the tool's
error as it came. An agent that acts on the one and not on the other gains in every guarded arm, so an
arm's change against ``off`` is that *base* plus its lever's own effect. The ``base`` arm (guarded, no
lever) measures the base; a lever's own change is its arm's change minus base's.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmark.campaign.agg_types import LiftRow
from benchmark.campaign.arms import ARMS

__all__ = ["base_notes"]


def _pp(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f} pp"


def base_notes(lift: Sequence[LiftRow]) -> list[str]:
    """One note per agent whose lift rows hold a guarded arm: what the base is, and — with a ``base``
    arm — its size and each other guarded arm's own change (its Δ pass@1 minus base's)."""
    notes: list[str] = []
    agents = dict.fromkeys(x.agent for x in lift if x.arm in ARMS and ARMS[x.arm].guarded)
    for agent in agents:
        rows = [x for x in lift if x.agent == agent and x.arm in ARMS and ARMS[x.arm].guarded]
        who = f"{agent}: " if len(agents) > 1 else ""
        text = (
            f"{who}base: Δ vs off of every guarded arm includes the base all of them share — a failed "
            "call is answered with the guard's class and what to do next, where `off` shows the tool's "
            "error as it came."
        )
        base = next((x for x in rows if x.arm == "base"), None)
        if base is None or base.pass1_change is None:
            notes.append(text + " Run the `base` arm (guarded, no lever) to measure it.")
            continue
        own = [
            f"{x.arm} {_pp(x.pass1_change - base.pass1_change if x.pass1_change is not None else None)}"
            for x in rows
            if x.arm != "base"
        ]
        notes.append(
            f"{text} Measured by the `base` arm: Δ pass@1 {_pp(base.pass1_change)}. Each lever's own "
            f"change (its Δ pass@1 minus base's): {', '.join(own) or 'no other guarded arm'}."
        )
    return notes
