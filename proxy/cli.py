"""The ``shadowguard`` console script.

The root command lives here; the benchmark's command groups are mounted from ``benchmark.cli`` (the
only place where ``proxy`` reaches into ``benchmark``: composing the command line, see docs/adr/001).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from guard.policy import PolicyPack

app = typer.Typer(help="shadowguard: guardrail middleware for live AI agents.", no_args_is_help=True)


_mounted = False


def _mount_benchmark() -> None:
    global _mounted
    if _mounted:
        return
    from benchmark.cli import bench_app, env_app

    app.add_typer(bench_app, name="bench")
    app.add_typer(env_app, name="env")
    _mounted = True


@app.command("check")
def check(
    pack: Annotated[Path, typer.Argument(help="Policy pack YAML file.", metavar="PACK", show_default=False)],
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
) -> None:
    """Load and validate a policy pack (docs/policies.md); exit 1 naming file, rule and line if invalid."""
    from guard.policy import PolicyError, load_policy

    try:
        policy = load_policy(pack) if domain is None else _load_against_domain(pack, domain, data)
    except PolicyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(_summary(pack, policy, domain))


def _load_against_domain(pack: Path, domain: str, data: str | None) -> PolicyPack:
    from benchmark.envs import DOMAINS, EnvError, load_domain
    from benchmark.guarded import load_domain_policy
    from benchmark.tasks import resolve_data

    if domain not in DOMAINS:
        raise typer.BadParameter(
            f"unknown domain {domain!r}; implemented: {', '.join(sorted(DOMAINS))}", param_hint="--domain"
        )
    try:
        loaded = load_domain(domain, resolve_data(data).bundle)
    except (EnvError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return load_domain_policy(pack, loaded)


def _summary(path: Path, policy: PolicyPack, domain: str | None) -> str:
    from guard.checks import PHASES

    model = policy.model
    phases = [c.phase for c in policy.checks]
    counts = ", ".join(f"{phases.count(p)} {p}" for p in PHASES)
    allowed = "all tools" if model.tools.allow is None else f"{len(model.tools.allow)} tools"
    against = (
        f"checked against {domain}" if domain else "no --domain: tables, columns and tool names not checked"
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

    from guard.policy import PolicyError
    from proxy.app import run_http, run_stdio
    from proxy.config import ConfigError, ProxyConfig
    from proxy.upstreams import UpstreamError

    try:
        settings = ProxyConfig.load(config)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not settings.upstreams:
        typer.echo(f"error: {config}: no upstreams configured: nothing to serve", err=True)
        raise typer.Exit(2)
    try:
        if stdio:
            anyio.run(lambda: run_stdio(settings, side_http="http" in settings.model_fields_set))
        else:
            anyio.run(run_http, settings)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (PolicyError, UpstreamError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def main() -> None:
    _mount_benchmark()
    app()
