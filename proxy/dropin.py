"""How the proxy meets clients and agents that know nothing of shadowguard (issue 14).

* :func:`default_session`: the session of a call that names none (docs/adr/008-default-sessions.md):
  a read runs in a session of its own, any other call mints one the result names;
* :func:`commit_description` and :func:`rollback_description`: the commit and rollback tools' texts,
  true for the upstreams at hand (what is pending until commit, what is already applied).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from guard.effects import classify
from guard.models import EffectClass
from proxy.catalog import ToolRoute
from proxy.sessions import SESSION_META_KEY
from proxy.upstreams import Upstream


def default_session(route: ToolRoute, arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The session of a call that names none (docs/adr/008-default-sessions.md): a read runs in a
    session of its own, ended with the call (stamped ``sessionless``); any other call mints a session
    whose id the result states, with the ``_meta`` the client sends to stay in it."""
    upstream = route.upstream
    effect, _ = classify(upstream.tool_info(route.name), arguments, upstream.policy.effect_of(route.name))
    if effect is EffectClass.READ:
        return f"read:{uuid.uuid4().hex}", {"sessionless": True}
    minted = f"minted:{uuid.uuid4().hex}"
    return minted, {"send": {"_meta": {SESSION_META_KEY: minted}}}


def upstream_label(upstream: Upstream) -> str:
    """An upstream as the tool texts name it: its name, and its tools' prefix if it has one."""
    return f"{upstream.name!r} ({upstream.prefix}*)" if upstream.prefix else repr(upstream.name)


def _names(labels: Sequence[str]) -> str:
    return ", ".join(labels)


def commit_description(held: Sequence[str], applied: Sequence[str]) -> str:
    """The commit tool's text: what is pending and what is already real, upstream by upstream."""
    text = "Make this session's changes durable. "
    if held:
        text += (
            f"Changes through the tools of {_names(held)} are pending until you call it, and a rollback "
            "discards them. "
        )
    if applied:
        text += (
            f"Calls to the tools of {_names(applied)} are applied at once, when they return: they are "
            "already real, commit only makes them final, and until then a rollback can undo them only "
            "through compensating calls the policy names. "
        )
    return text + (
        "Call it once, when the task's changes are complete and correct. The guard first checks the "
        "final state against the policy; if a rule is broken nothing is committed and the violations "
        "come back as an error, each with a hint: fix them and call it again."
    )


def rollback_description(held: Sequence[str], applied: Sequence[str]) -> str:
    """The rollback tool's text: what it discards, and what it can undo only by compensation."""
    text = "Undo this session's uncommitted work, e.g. after a mistake you cannot fix step by step. "
    if held:
        text += f"Pending changes through the tools of {_names(held)} are discarded. "
    if applied:
        text += (
            f"Calls to the tools of {_names(applied)} were already applied: they are undone only where "
            "the policy names a compensating call; the answer lists any that stay in effect."
        )
    return text.rstrip()


__all__ = ["commit_description", "default_session", "rollback_description", "upstream_label"]
