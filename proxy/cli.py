"""The ``shadowguard`` console script.

The root command lives here; the benchmark's command groups are mounted from ``benchmark.cli`` (the
only place where ``proxy`` reaches into ``benchmark``: composing the command line, see docs/adr/001).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

if TYPE_CHECKING:
    from guard.policy import PolicyPack

app = typer.Typer(help="shadowguard: guardrail middleware for live AI agents.", no_args_is_help=True)


_mounted = False


def _mount_benchmark() -> ModuleType:
    """Mounts the benchmark's command groups (once) and returns ``benchmark.packcheck``, the benchmark
    side of ``check --domain`` / ``--test``: the only two ways the proxy package reaches the benchmark."""
    global _mounted
    from benchmark import packcheck

    if not _mounted:
        from benchmark.cli import bench_app, env_app

        app.add_typer(bench_app, name="bench")
        app.add_typer(env_app, name="env")
        _mounted = True
    return packcheck


@app.command("check")
def check(
    pack: Annotated[
        Path,
        typer.Argument(help="Policy pack: its YAML file or its folder.", metavar="PACK", show_default=False),
    ],
    domain: Annotated[
        str | None,
        typer.Option(
            "--domain",
            help="Benchmark domain to check the pack against: SQL tables and columns, tool names, "
            "and the tool arguments bound as :parameters.",
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            help="Benchmark data for --domain (default: $SHADOWGUARD_BENCH_DATA, "
            "else ../shared/thinkingbox-bench).",
        ),
    ] = None,
    test: Annotated[
        bool,
        typer.Option(
            "--test",
            help="Also run the table-driven tests in tests.yaml beside the pack, in its domain "
            "(--domain, else the pack's own domain); see docs/policies.md.",
        ),
    ] = False,
    require_coverage: Annotated[
        bool, typer.Option("--require-coverage", help="With --test: fail when a rule has no case.")
    ] = False,
    migrate: Annotated[
        bool,
        typer.Option(
            "--migrate",
            help="Print the pack (format v1) migrated to format v2 on stdout, instead of the summary.",
        ),
    ] = False,
) -> None:
    """Load and validate a policy pack (docs/policies.md); exit 1 naming file, rule and line if invalid."""
    from guard.policy import PolicyError, load_policy

    if pack.is_dir():
        pack = pack / "policy.yaml"
    if migrate:
        _migrate(pack)
        return
    if test and domain is None:
        try:
            domain = load_policy(pack).model.domain
        except PolicyError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        if domain is None:
            typer.echo(f"error: {pack}: --test needs --domain (the pack names no domain)", err=True)
            raise typer.Exit(2)
    try:
        policy = (
            load_policy(pack)
            if domain is None
            else _mount_benchmark().load_against_domain(pack, domain, data)
        )
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(_summary(pack, policy, domain))
    if test:
        assert domain is not None
        _mount_benchmark().run_pack_tests(pack, policy, domain, data, require_coverage=require_coverage)


def _migrate(pack: Path) -> None:
    from guard.packmigrate import MigrationError
    from guard.packmigrate import migrate as to_v2
    from guard.policy import PolicyError, load_policy

    try:
        typer.echo(to_v2(load_policy(pack)), nl=False)
    except (PolicyError, MigrationError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _summary(path: Path, policy: PolicyPack, domain: str | None) -> str:
    from guard.checks import PHASES

    model = policy.model
    phases = [c.phase for c in policy.checks]
    counts = ", ".join(f"{phases.count(p)} {p}" for p in PHASES)
    allowed = "all tools" if model.tools.allow is None else f"{len(model.tools.allow)} tools"
    against = (
        f"checked against {domain}" if domain else "no --domain: tables, columns and tool names not checked"
    )
    if model.version == 2:
        bodies = policy.body_counts()
        shape = ", ".join(f"{n} {kind}" for kind, n in bodies.items() if n)
        typing = (
            "args typed from the tools' input schemas"
            if policy.typed
            else "args untyped: no tool schemas known (pass --domain)"
        )
        return (
            f"{path}: ok: pack {model.name!r} (format v2): {len(policy.checks)} rules ({counts}; {shape}), "
            f"approval rules {len(model.approvals)} ({len(policy.conditions)} with conditions), "
            f"{len(model.tools.effects)} tools with an effect, {allowed} on the surface"
            f"{f', {len(policy.hidden)} hidden' if policy.hidden else ''}, "
            f"retry overrides {len(model.retry)}, {len(policy.document.tables)} table aliases; "
            f"{typing}; {against}"
        )
    return (
        f"{path}: ok: pack {model.name!r}: {len(policy.checks)} checks ({counts}), "
        f"approval rules {len(model.approvals)}, retry overrides {len(model.retry)}, "
        f"effect classes {len(model.tools.effects)}, {allowed} allowed; {against}"
    )


@app.command("serve")
def serve(
    config: Annotated[
        Path,
        typer.Option("--config", help="Proxy config YAML (docs/proxy.md).", show_default=False),
    ],
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            help="Serve one agent on stdin/stdout instead of HTTP. The HTTP app (sessions API, health, "
            "metrics, /mcp) then runs on a side port only if the config has an 'http' section.",
        ),
    ] = False,
) -> None:
    """Run the MCP session proxy: every agent tool call guarded, commit only through the guard."""
    import anyio

    from guard.approvals import ApprovalStoreError
    from guard.policy import PolicyError
    from proxy.config import ConfigError, ProxyConfig
    from proxy.held import NoReviewerError
    from proxy.ledger import LedgerError
    from proxy.serve import loop_options, run_http, run_stdio
    from proxy.upstream_types import UpstreamError

    try:
        settings = ProxyConfig.load(config)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not settings.upstreams:
        typer.echo(f"error: {config}: no upstreams configured: nothing to serve", err=True)
        raise typer.Exit(2)
    try:
        options = loop_options(settings.proxy.event_loop)
        if stdio:
            anyio.run(
                lambda: run_stdio(settings, side_http="http" in settings.model_fields_set),
                backend_options=options,
            )
        else:
            anyio.run(run_http, settings, backend_options=options)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (PolicyError, UpstreamError, ApprovalStoreError, LedgerError, NoReviewerError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# -- approvals: the reviewer's command line (a client of the approvals REST API) ----------------------

approvals_app = typer.Typer(
    help="Review calls held for human approval, through a running proxy's approvals API "
    "(docs/approvals.md). Exit 0 done, 1 refused by the API or unreachable, 2 usage.",
    no_args_is_help=True,
)
app.add_typer(approvals_app, name="approvals")

DEFAULT_URL = "http://127.0.0.1:8790"
URL_ENV = "SHADOWGUARD_URL"
TOKEN_ENV = "SHADOWGUARD_REVIEWER_TOKEN"  # noqa: S105 (the variable's name, not a token)

UrlOption = Annotated[
    str, typer.Option("--url", envvar=URL_ENV, help="The proxy's base URL.", show_envvar=True)
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help=f"File holding the reviewer token (default: ${TOKEN_ENV}).",
        exists=True,
        dir_okay=False,
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the API's JSON as it is.")]


class TokenRole(StrEnum):
    VIEWER = "viewer"
    APPROVER = "approver"
    AGENT = "agent"
    ORCHESTRATOR = "orchestrator"


IdArgument = Annotated[
    str, typer.Argument(help="The approval's id (apr_...).", metavar="ID", show_default=False)
]


def _reviewer_token(token_file: Path | None) -> str:
    import os

    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise typer.BadParameter(f"{token_file} is empty", param_hint="--token-file")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise typer.BadParameter(f"no reviewer token: set ${TOKEN_ENV} or pass --token-file")
    return token


def _api(url: str, token_file: Path | None, method: str, path: str, **kwargs: Any) -> Any:
    """Call the approvals API; exit 1 with the API's own message when it refuses or cannot be reached."""
    import httpx2

    token = _reviewer_token(token_file)
    base = url.rstrip("/")
    try:
        with httpx2.Client(base_url=base, timeout=30.0) as client:
            response = client.request(
                method, f"/api/approvals{path}", headers={"Authorization": f"Bearer {token}"}, **kwargs
            )
    except httpx2.HTTPError as exc:
        typer.echo(f"error: cannot reach the approvals API at {base}: {exc}", err=True)
        raise typer.Exit(1) from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and "message" in error:
            message = f"{error.get('code')}: {error['message']}"
        else:
            message = response.text.strip() or response.reason_phrase
        typer.echo(f"error: {response.status_code} {message}", err=True)
        raise typer.Exit(1)
    if body is None:
        typer.echo(f"error: {base} answered {response.status_code} without JSON", err=True)
        raise typer.Exit(1)
    return body


def _echo_json(body: Any) -> None:
    import json

    typer.echo(json.dumps(body, indent=2, ensure_ascii=False))


def _value(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)


def _row_diff(change: dict[str, Any]) -> list[str]:
    """One row change as lines: ``- col: before`` / ``+ col: after`` for the columns that differ."""
    before: dict[str, Any] = change.get("before") or {}
    after: dict[str, Any] = change.get("after") or {}
    lines = [f"  {change['op']} {change['table']} {change['key']}"]
    for column in sorted({*before, *after}):
        old, new = before.get(column), after.get(column)
        if column in before and column in after and old == new:
            continue
        if column in before:
            lines.append(f"    - {column}: {_value(old)}")
        if column in after:
            lines.append(f"    + {column}: {_value(new)}")
    return lines


def _show_text(approval: dict[str, Any]) -> list[str]:
    upstream = approval.get("upstream") or "-"
    lines = [
        f"{approval['id']}  {approval['state']}",
        f"  tool       {approval['tool']}  (effect {approval['effect']}, upstream {upstream})",
        f"  principal  {approval.get('principal') or '-'}  session {approval['session_id']}",
        f"  arguments  {_value(approval['arguments'])}",
        f"  digest     {approval['arguments_digest']}",
        f"  rule       {approval['rule_id']}",
    ]
    source = approval.get("rule_source")
    if source:
        quote = f': "{source["quote"]}"' if source.get("quote") else ""
        lines.append(f"  policy     {source['ref']}{quote}")
    lines.append(f"  created    {approval['created_at']}  expires {approval['expires_at']}")
    if approval.get("decided_at"):
        reason = f": {approval['reason']}" if approval.get("reason") else ""
        lines.append(f"  decided    {approval['decided_at']} by {approval.get('decided_by')}{reason}")
    if approval.get("used_at"):
        lines.append(f"  used       {approval['used_at']} by {approval.get('used_by')}")
    for check in approval.get("checks", []):
        if check["passed"]:  # a passing check's message is its violation text: not shown
            lines.append(f"  check      pass {check['rule_id']}")
            continue
        message = f": {check['message']}" if check.get("message") else ""
        lines.append(f"  check      FAIL {check['rule_id']}{message}")
    changes = approval.get("preview", {}).get("changes", [])
    rehearsed = "" if approval.get("rehearsed", True) else " (not rehearsed: the backend cannot preview)"
    lines.append(f"changes ({len(changes)}){rehearsed}:")
    for change in changes:
        lines.extend(_row_diff(change))
    if "history" in approval:
        lines.append("history:")
        for event in approval["history"]:
            reason = f": {event['reason']}" if event.get("reason") else ""
            lines.append(f"  {event['at']}  {event['action']} by {event['actor']}{reason}")
    return lines


def _decide(
    approval_id: str,
    decision: Literal["approve", "reject"],
    reason: str | None,
    *,
    as_json: bool,
    url: str,
    token_file: Path | None,
) -> None:
    """Send the decision; print the decided approval as JSON, or as one line (a rejection's with its
    reason)."""
    body = _api(url, token_file, "POST", f"/{approval_id}/{decision}", json={"reason": reason})
    if as_json:
        _echo_json(body)
    else:
        line = f"{body['id']}: {body['state']} by {body['decided_by']}"
        typer.echo(line if decision == "approve" else f"{line}: {body['reason']}")


@approvals_app.command("list")
def approvals_list(
    state: Annotated[
        list[str] | None, typer.Option("--state", help="Only this state (repeatable): pending, approved, ...")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", help="Only this guard session.")] = None,
    principal: Annotated[str | None, typer.Option("--principal", help="Only this principal.")] = None,
    tool: Annotated[str | None, typer.Option("--tool", help="Only this tool.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    as_json: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
    token_file: TokenFileOption = None,
) -> None:
    """The approval queue, newest first."""
    params: dict[str, Any] = {"limit": limit}
    for key, value in (("state", state), ("session_id", session), ("principal", principal), ("tool", tool)):
        if value:
            params[key] = value
    body = _api(url, token_file, "GET", "", params=params)
    if as_json:
        _echo_json(body)
        return
    if not body["items"]:
        typer.echo("no approvals")
        return
    for item in body["items"]:
        changes = len(item.get("preview", {}).get("changes", []))
        typer.echo(
            f"{item['id']}  {item['state']:<9}  {item['tool']}  principal={item.get('principal') or '-'}  "
            f"rule={item['rule_id']}  changes={changes}  expires={item['expires_at']}"
        )


@approvals_app.command("show")
def approvals_show(
    approval_id: IdArgument,
    as_json: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
    token_file: TokenFileOption = None,
) -> None:
    """One approval: the call, the rows it would change (before/after), the checks and its history."""
    body = _api(url, token_file, "GET", f"/{approval_id}")
    if as_json:
        _echo_json(body)
    else:
        typer.echo("\n".join(_show_text(body)))


@approvals_app.command("approve")
def approvals_approve(
    approval_id: IdArgument,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (optional; recorded).")] = None,
    as_json: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
    token_file: TokenFileOption = None,
) -> None:
    """Approve a pending request: the held call may then run, once."""
    _decide(approval_id, "approve", reason, as_json=as_json, url=url, token_file=token_file)


@approvals_app.command("reject")
def approvals_reject(
    approval_id: IdArgument,
    reason: Annotated[
        str, typer.Option("--reason", help="Why (required; sent back to the agent).", show_default=False)
    ],
    as_json: JsonOption = False,
    url: UrlOption = DEFAULT_URL,
    token_file: TokenFileOption = None,
) -> None:
    """Reject a pending request; the agent is told the reason."""
    _decide(approval_id, "reject", reason, as_json=as_json, url=url, token_file=token_file)


@approvals_app.command("token")
def approvals_token(
    name: Annotated[str, typer.Option("--name", help="Who holds the token.", show_default=False)],
    role: Annotated[
        TokenRole,
        typer.Option(
            "--role",
            help="viewer or approver (a reviewer), agent (for /mcp), or orchestrator (for /api/sessions).",
            show_default=False,
        ),
    ],
) -> None:
    """Make a new random token: printed once, with the config snippet that holds only its sha256."""
    import secrets

    import yaml

    from proxy.approvals.auth import hash_token

    if not name.strip() or len(name) > 128:
        raise typer.BadParameter("must be 1 to 128 characters", param_hint="--name")
    token = secrets.token_urlsafe(32)
    entry: dict[str, str] = {"name": name}
    if role in (TokenRole.VIEWER, TokenRole.APPROVER):
        entry["role"] = role.value
    entry["token_sha256"] = hash_token(token)
    sections = {TokenRole.AGENT: "agents", TokenRole.ORCHESTRATOR: "orchestrators"}
    section = sections.get(role, "reviewers")
    snippet = yaml.safe_dump({"auth": {section: [entry]}}, sort_keys=False).rstrip()
    typer.echo(f"token (shown once, keep it secret): {token}")
    typer.echo(f"add to the proxy config (merge into auth.{section} if it exists):")
    typer.echo(snippet)


_BENCHMARK_GROUPS = frozenset({"bench", "env"})


def _needs_benchmark(argv: list[str]) -> bool:
    """Whether a command line reaches the benchmark's command groups: its command is ``bench`` or
    ``env``, or it names no command (the root help lists every group). ``serve`` and the other proxy
    commands start without importing the benchmark (and its model clients), which halves their
    start-up time."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    return command is None or command in _BENCHMARK_GROUPS


def main() -> None:
    if _needs_benchmark(sys.argv[1:]):
        _mount_benchmark()
    app()
