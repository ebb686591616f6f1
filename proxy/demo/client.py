"""The scripted agent of the quickstart: talks to a running proxy over HTTP and narrates what happens.

It plays one agent session against the demo accounts app behind the guard: a read, a reversible
write that stays in the shadow transaction (another session does not see it yet), a transfer that
would overdraw an account (run, caught by an after-call rule, rolled back), a transfer touching a
frozen account (refused before it runs), a transfer within the rules, a large transfer held for a
second person, who approves it, after which the same call runs exactly as previewed, a second large
transfer that the reviewer rejects (the agent gets the reason), the commit, and finally a new
session reading the committed state. Every step prints the guard's verdict and what the agent is
told. The exit status is 1 if any verdict differs from the one the example policy pack implies, so
``make demo`` doubles as an end-to-end check.

The reviewer is played through the proxy's approvals REST API (docs/approvals.md), as a person's
tools would: it needs a reviewer token with the approver role (``python -m proxy.demo`` makes one
per run; by hand, ``shadowguard approvals token`` and ``$SHADOWGUARD_REVIEWER_TOKEN``).

The session is named in ``_meta["shadowguard/session"]`` on every call, which works in both protocol
eras (the 2026-07-28 HTTP era has no ``Mcp-Session-Id``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp.types as types
from mcp import Client

SESSION_META_KEY = "shadowguard/session"
OUTCOME_META_KEY = "shadowguard/outcome"
DEFAULT_URL = "http://127.0.0.1:8790/mcp"
API_PATH = "/api/approvals"
TOKEN_ENV = "SHADOWGUARD_REVIEWER_TOKEN"  # noqa: S105 - the variable's name, not a token
LARGE_TRANSFER = 1200
"""Above the example pack's approval threshold (1000), within the payer's balance after step 6."""
COMMIT_TOOL = "commit"
ROLLBACK_TOOL = "rollback"
GUARD_TOOLS = {
    COMMIT_TOOL: "the guard's: commit the session",
    ROLLBACK_TOOL: "the guard's: roll back the session",
}

Print = Callable[[str], None]


class NotReadyError(RuntimeError):
    """The proxy did not report ready in time."""


class ReviewError(RuntimeError):
    """The approvals API refused or could not be reached; the message says which and why."""


def readyz_url(mcp_url: str) -> str:
    """``http://host:port/mcp`` -> ``http://host:port/readyz``."""
    parts = urllib.parse.urlsplit(mcp_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/readyz", "", ""))


def base_url(mcp_url: str) -> str:
    """``http://host:port/mcp`` -> ``http://host:port`` (where ``/api/approvals`` is served)."""
    parts = urllib.parse.urlsplit(mcp_url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def wait_ready(mcp_url: str, timeout_s: float, *, alive: Callable[[], bool] = lambda: True) -> None:
    """Poll ``/readyz`` until it answers 200; ``alive`` false (the proxy process ended) stops early."""
    url = readyz_url(mcp_url)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise NotReadyError(f"the proxy exited before it was ready ({url}: {last})")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - http(s) URL of our proxy
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            last = f"{exc.code} {exc.read().decode(errors='replace')}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise NotReadyError(f"{url} did not answer 200 within {timeout_s:g} s (last: {last})")


def _meta(session: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {SESSION_META_KEY: session})


def _text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


def _verdict(result: types.CallToolResult) -> str:
    stamp = (result.meta or {}).get(OUTCOME_META_KEY)
    if isinstance(stamp, Mapping) and isinstance(stamp.get("verdict"), str):
        return str(stamp["verdict"])
    return "error" if result.is_error else "ok"


def _effect(tool: types.Tool) -> str:
    hints = tool.annotations
    if hints is None:
        return "unannotated"
    if hints.read_only_hint:
        return "read"
    return "irreversible write" if hints.destructive_hint is not False else "reversible write"


def _accounts(result: types.CallToolResult) -> list[dict[str, Any]]:
    """The accounts a ``list_accounts`` result holds (none when the call did not go through)."""
    if result.is_error:
        return []
    body = result.structured_content or json.loads(_text(result))
    accounts: list[dict[str, Any]] = body.get("accounts", [])
    return accounts


def _summary(result: types.CallToolResult) -> str:
    """One line for the demo app's answers (the agent itself gets the app's JSON unchanged)."""
    body = result.structured_content
    if result.is_error or not isinstance(body, Mapping):
        return _text(result)
    if "transfer" in body:
        t, source, target = body["transfer"], body["from"], body["to"]
        return (
            f"transfer #{t['id']}: {t['amount']} {t['currency']} {t['from_account']} -> {t['to_account']}; "
            f"balances now {source['balance']} / {target['balance']} (in this session's shadow transaction)"
        )
    if "account" in body:
        a = body["account"]
        return f"{a['id']} is now named {a['name']!r} (in this session's shadow transaction)"
    return _text(result)


def _indent(text: str, prefix: str = "     ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _stamp(result: types.CallToolResult) -> Mapping[str, Any]:
    stamp = (result.meta or {}).get(OUTCOME_META_KEY)
    return stamp if isinstance(stamp, Mapping) else {}


def _money(cents: Any) -> str:
    return f"{int(cents) / 100:.2f}"


def _preview_lines(approval: Mapping[str, Any]) -> list[str]:
    """The rehearsed change set as the reviewer reads it: each account's balance before and after."""
    lines = []
    for change in approval["preview"]["changes"]:
        before, after = change.get("before") or {}, change.get("after") or {}
        if change["table"] == "accounts" and "balance_cents" in after:
            was = _money(before["balance_cents"]) if before else "-"
            now = _money(after["balance_cents"])
            lines.append(f"{change['op']:<6} accounts  {change['key']:<10} balance {was:>8} -> {now:>8}")
        elif change["table"] == "transfers" and after:
            lines.append(
                f"{change['op']:<6} transfers #{change['key']:<9} {_money(after['amount_cents'])} "
                f"{after['from_account']} -> {after['to_account']} ({after['memo']!r})"
            )
        else:
            lines.append(f"{change['op']:<6} {change['table']}  {change['key']}")
    return lines


def _previewed_balances(approval: Mapping[str, Any]) -> dict[str, str]:
    return {
        c["key"]: _money(c["after"]["balance_cents"])
        for c in approval["preview"]["changes"]
        if c["table"] == "accounts" and c.get("after")
    }


@dataclass
class ReviewDesk:
    """The second person: reads and decides held calls through the proxy's approvals REST API."""

    http: httpx2.AsyncClient
    out: Print

    async def _send(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        path = API_PATH + path
        shown = f" {json.dumps(body)}" if body is not None else ""
        self.out(f"   reviewer -> {method} {path}{shown}")
        try:
            response = await self.http.request(method, path, json=body)
        except httpx2.HTTPError as exc:
            raise ReviewError(f"{method} {path}: the approvals API could not be reached: {exc}") from exc
        if response.status_code != 200:
            raise ReviewError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    async def pending(self, session: str) -> list[dict[str, Any]]:
        """The session's pending requests (a queue kept across runs may hold others)."""
        body = await self._send("GET", f"?state=pending&session_id={urllib.parse.quote(session)}")
        items: list[dict[str, Any]] = body["items"]
        for a in items:
            self.out(
                f"     {a['id']}  {a['state']}  {a['tool']}  rule={a['rule_id']}  session={a['session_id']}"
            )
        return items

    async def show(self, approval_id: str) -> dict[str, Any]:
        approval: dict[str, Any] = await self._send("GET", f"/{approval_id}")
        args = ", ".join(f"{k}={v!r}" for k, v in approval["arguments"].items())
        self.out(f"     call: {approval['tool']}({args})")
        source = approval.get("rule_source") or {}
        self.out(f"     rule: {approval['rule_id']} ({source.get('ref', 'no source')})")
        self.out("     what it would change (rehearsed, then rolled back):")
        self.out(_indent("\n".join(_preview_lines(approval)), "       "))
        return approval

    async def decide(self, approval_id: str, *, approve: bool, reason: str) -> dict[str, Any]:
        verb = "approve" if approve else "reject"
        decided: dict[str, Any] = await self._send("POST", f"/{approval_id}/{verb}", {"reason": reason})
        self.out(f"     {decided['state']} by {decided['decided_by']}")
        command = f"shadowguard approvals {verb} {approval_id} --reason {shlex.quote(reason)}"
        self.out(f"     (the same from a shell: {command})")
        return decided


@dataclass
class Story:
    """Runs the steps, prints them, and remembers any verdict that was not the expected one."""

    client: Client
    session: str
    out: Print
    surprises: list[str] = field(default_factory=list)
    step: int = 0

    def say(self, title: str) -> None:
        self.step += 1
        self.out(f"\n{self.step}. {title}")

    async def call(
        self, tool: str, arguments: Mapping[str, Any], expect: str, *, session: str | None = None
    ) -> types.CallToolResult:
        shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        self.out(f"   agent -> {tool}({shown})")
        result = await self.client.call_tool(tool, dict(arguments), meta=_meta(session or self.session))
        verdict = _verdict(result)
        approval = _stamp(result).get("approval_id")
        state = f" (approval {approval}: {_stamp(result).get('approval_state')})" if approval else ""
        self.out(f"   guard -> {verdict}{state}{'' if verdict == expect else f'   (expected {expect})'}")
        if verdict != expect:
            self.surprises.append(f"step {self.step}: {tool} was {verdict}, expected {expect}")
        return result

    def show_accounts(self, result: types.CallToolResult) -> list[dict[str, Any]]:
        accounts = _accounts(result)
        if not accounts:
            self.out(_indent(_text(result)))
        for a in accounts:
            row = f"{a['id']:<10} {a['owner']:<13} {a['name']:<12} {a['status']:<7}"
            self.out(f"     {row} {a['balance']:>9} {a['currency']}")
        return accounts


async def run(url: str = DEFAULT_URL, *, reviewer_token: str, mode: str = "auto", out: Print = print) -> int:
    """Play the story against the proxy at ``url``; 0 if every verdict was the expected one.

    ``reviewer_token``: a token of a reviewer with the approver role in the proxy's ``auth.reviewers``.
    """
    session = f"demo-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {reviewer_token}"}
    async with (
        httpx2.AsyncClient(base_url=base_url(url), headers=headers, timeout=30.0) as http,
        Client(url, mode=mode, cache=None, read_timeout_seconds=60) as client,
    ):
        story = Story(client, session, out)
        out(f"shadowguard demo: agent session {session!r} at {url} (protocol {client.protocol_version})")
        try:
            await _play(story, ReviewDesk(http, out))
        except ReviewError as exc:
            out(f"\ndemo: the reviewer's step failed: {exc}")
            return 1
    if story.surprises:
        out("\ndemo: unexpected verdicts:\n" + "\n".join(f"  {s}" for s in story.surprises))
        return 1
    out("\ndemo: every verdict as the policy pack says")
    return 0


async def _play(story: Story, desk: ReviewDesk) -> None:
    """The story's steps; a verdict other than the expected one is noted in ``story.surprises``."""
    client, session, out = story.client, story.session, story.out

    story.say("The agent lists its tools: the app's, with their effect, and the guard's own")
    for tool in (await client.list_tools()).tools:
        out(f"     {tool.name:<15} {GUARD_TOOLS.get(tool.name) or _effect(tool)}")

    story.say("Read: the accounts as they are")
    accounts = story.show_accounts(await story.call("list_accounts", {}, "allowed"))
    if not accounts:
        story.surprises.append("the app listed no accounts; is the proxy in front of proxy.demo.server?")
        return
    active = sorted((a for a in accounts if a["status"] == "active"), key=lambda a: -float(a["balance"]))
    frozen = next(a for a in accounts if a["status"] == "frozen")
    payer, payee = active[0], active[1]

    story.say("Reversible write: rename an account (kept in the shadow transaction, not yet committed)")
    new_name = "Household" if payer["name"] != "Household" else "Everyday"
    renamed = await story.call("rename_account", {"account_id": payer["id"], "name": new_name}, "allowed")
    out(_indent(_summary(renamed)))
    out("   another session reads the accounts meanwhile: it still sees the committed name")
    others = await story.call("list_accounts", {}, "allowed", session=session + "-observer")
    seen = next((a["name"] for a in _accounts(others) if a["id"] == payer["id"]), None)
    out(f"     {payer['id']}: {seen!r}" if seen is not None else _indent(_text(others)))
    if seen is not None and seen != payer["name"]:
        story.surprises.append(f"step {story.step}: another session saw the uncommitted name {seen!r}")
    await client.call_tool(ROLLBACK_TOOL, {}, meta=_meta(session + "-observer"))

    story.say("A bad write: transfer more than the balance (it runs in a savepoint, a rule catches it)")
    overdraft = round(float(payer["balance"]) + 100, 2)
    bad = await story.call(
        "transfer_funds",
        {"from_account": payer["id"], "to_account": payee["id"], "amount": overdraft, "memo": "rent"},
        "rolled_back",
    )
    out(_indent(_text(bad)))

    story.say("A transfer to a frozen account (refused before it runs)")
    refused = await story.call(
        "transfer_funds",
        {"from_account": payer["id"], "to_account": frozen["id"], "amount": 20, "memo": "gift"},
        "refused",
    )
    out(_indent(_text(refused)))

    story.say("An irreversible write within the rules: transfer 25.00")
    moved = await story.call(
        "transfer_funds",
        {"from_account": payer["id"], "to_account": payee["id"], "amount": 25, "memo": "books"},
        "allowed",
    )
    out(_indent(_summary(moved)))

    large = {"from_account": payer["id"], "to_account": payee["id"], "amount": LARGE_TRANSFER, "memo": "car"}
    story.say(
        f"A large transfer needs a second person: {LARGE_TRANSFER}.00 is rehearsed, rolled back and held"
    )
    held = await story.call("transfer_funds", large, "held")
    out(_indent(_text(held)))
    approval_id = _stamp(held).get("approval_id")
    if not isinstance(approval_id, str):
        story.surprises.append(f"step {story.step}: the held call names no approval request")
        return

    story.say("The reviewer reads the queue and the rehearsed changes, and approves (REST API)")
    queue = await desk.pending(session)
    if [a["id"] for a in queue] != [approval_id]:
        story.surprises.append(f"step {story.step}: the pending queue is {[a['id'] for a in queue]}")
    approval = await desk.show(approval_id)
    await desk.decide(approval_id, approve=True, reason="four-eyes check done: the car purchase was agreed")

    story.say("The agent sends the same call again: it runs for real, and changes exactly what was previewed")
    done = await story.call("transfer_funds", large, "allowed")
    out(_indent(_summary(done)))
    _expect_approval(story, done, approval_id, "used")
    body = done.structured_content or {}
    ran = {
        side["id"]: side["balance"]
        for side in (body.get("from"), body.get("to"))
        if isinstance(side, Mapping)
    }
    if ran != _previewed_balances(approval):
        story.surprises.append(f"step {story.step}: balances {ran} differ from the preview's")

    story.say("Another large transfer, which the reviewer rejects: the agent is told why")
    back = {"from_account": payee["id"], "to_account": payer["id"], "amount": 1100, "memo": "undo"}
    second = await story.call("transfer_funds", back, "held")
    second_id = _stamp(second).get("approval_id")
    if not isinstance(second_id, str):
        story.surprises.append(f"step {story.step}: the held call names no approval request")
        return
    await desk.decide(
        second_id, approve=False, reason="no reversal without a signed request from the customer"
    )
    answer = await story.call("transfer_funds", back, "refused")
    out(_indent(_text(answer)))
    _expect_approval(story, answer, second_id, "rejected")

    story.say("Commit: the commit rules run on the final state, then the changes become durable")
    committed = await story.call(COMMIT_TOOL, {}, "committed")
    out(_indent(_text(committed)))

    story.say("A new session reads the committed state")
    story.show_accounts(await story.call("list_accounts", {}, "allowed", session=session + "-after"))
    await client.call_tool(ROLLBACK_TOOL, {}, meta=_meta(session + "-after"))


def _expect_approval(story: Story, result: types.CallToolResult, approval_id: str, state: str) -> None:
    stamp = _stamp(result)
    if (stamp.get("approval_id"), stamp.get("approval_state")) != (approval_id, state):
        story.surprises.append(
            f"step {story.step}: approval {stamp.get('approval_id')} is {stamp.get('approval_state')}, "
            f"expected {approval_id} {state}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m proxy.demo.client", description="The shadowguard quickstart's scripted agent."
    )
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"the proxy's MCP endpoint (default {DEFAULT_URL})"
    )
    parser.add_argument(
        "--mode",
        choices=["auto", "legacy", "2026-07-28"],
        default="auto",
        help="protocol era: auto (2026-07-28 when the server offers it), legacy (handshake), or pinned",
    )
    parser.add_argument(
        "--wait", type=float, default=0.0, help="wait up to this many seconds for /readyz first"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"a file holding the reviewer token (default: ${TOKEN_ENV})",
    )
    options = parser.parse_args(argv)
    if options.token_file is not None:
        try:
            token = options.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            parser.error(f"cannot read --token-file: {exc}")
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        parser.error(
            f"the reviewer's steps need a reviewer token: set ${TOKEN_ENV} or pass --token-file. "
            "Make one with `shadowguard approvals token --name demo-reviewer --role approver` "
            "and add the entry it prints to the proxy config's auth.reviewers"
        )
    if options.wait > 0:
        try:
            wait_ready(options.url, options.wait)
        except NotReadyError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            raise SystemExit(2) from exc
    raise SystemExit(anyio.run(lambda: run(options.url, reviewer_token=token, mode=options.mode)))


if __name__ == "__main__":
    main()
