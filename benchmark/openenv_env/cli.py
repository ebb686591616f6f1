"""``shadowguard env openenv``: the guarded benchmark as an OpenEnv environment server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

ARM_HELP = (
    "Default arm of every episode (a reset may name another): guard, off, or one lever "
    "(validation, retries, checks, approvals, surface)."
)


def openenv_cmd(
    arm: Annotated[str, typer.Option("--arm", help=ARM_HELP)] = "guard",
    port: Annotated[int, typer.Option(help="Port (0: any free port; the URL goes to stderr).")] = 8000,
    host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
    max_episodes: Annotated[
        int, typer.Option(help="Most episodes (WebSocket sessions) at once.", min=1)
    ] = 64,
    data: Annotated[str | None, typer.Option("--data", help="Benchmark data (as for bench run).")] = None,
    db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL for episode state.")] = None,
    policy_dir: Annotated[Path, typer.Option(help="Policy packs, one folder per domain.")] = Path("policies"),
    reviewer: Annotated[
        str, typer.Option(help="Who decides held calls: approve-matching, reject-all or none.")
    ] = "approve-matching",
    user_sim: Annotated[
        str | None, typer.Option("--user-sim", help="User simulator as MODULE:ATTR (default: none).")
    ] = None,
    judge: Annotated[
        str | None, typer.Option("--judge", help="Rubric judge as MODULE:ATTR (default: none).")
    ] = None,
    domain: Annotated[
        list[str] | None,
        typer.Option("--domain", help="Serve only these domains' tasks (repeatable; default: all)."),
    ] = None,
    llm_config: Annotated[
        Path | None,
        typer.Option(
            "--llm-config",
            help="The user and judge roles of an LLM config (as for bench run --agent llm) answer "
            "submit_message and grade the rubric tasks.",
        ),
    ] = None,
) -> None:
    """Serve the 507 tasks over OpenEnv (WebSocket /ws, /ready) with the guard in each episode's path;
    see docs/openenv.md."""
    console = Console(stderr=True)
    try:
        from benchmark.openenv_env.hooks import RubricJudge, UserSimulator
        from benchmark.openenv_env.llm_hooks import load_llm_hooks
        from benchmark.openenv_env.server import serve
        from benchmark.openenv_env.shared import Shared
    except ImportError as exc:  # the optional extra is missing
        console.print(f"[red]error:[/red] {exc}; install the extra: pip install 'shadowguard[openenv]'")
        raise typer.Exit(2) from exc
    from sqlalchemy.exc import SQLAlchemyError

    from benchmark.campaign.surfaces import REVIEWERS
    from benchmark.envs import Database, EnvError
    from benchmark.tasks import resolve_data

    if reviewer not in REVIEWERS:
        raise typer.BadParameter(f"one of {', '.join(REVIEWERS)}", param_hint="--reviewer")
    hooks = None
    try:
        hooks = load_llm_hooks(llm_config) if llm_config is not None else None
        user = _hook("--user-sim", user_sim, hooks.user if hooks else None, UserSimulator)
        grader = _hook("--judge", judge, hooks.judge if hooks else None, RubricJudge)
        shared = Shared(
            resolve_data(data),
            Database(db),
            default_arm=arm,
            reviewer=reviewer,
            policy_dir=policy_dir,
            user=user,
            judge=grader,
            max_user_turns=hooks.max_user_turns if hooks else 10,
            llm_endpoints=hooks.describe() if hooks else {},
            domains_served=_domains(domain or []),
        )
    except (EnvError, ValueError, SQLAlchemyError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        if hooks is not None:
            hooks.close()
        raise typer.Exit(2) from exc
    try:
        serve(shared, host, port, max_episodes)
    finally:
        if hooks is not None:
            hooks.close()


def _domains(names: list[str]) -> tuple[str, ...]:
    from benchmark.envs import DOMAINS

    unknown = [n for n in names if n not in DOMAINS]
    if unknown:
        raise ValueError(f"--domain: unknown domain(s) {', '.join(unknown)}; one of {', '.join(DOMAINS)}")
    return tuple(names)


def _hook(option: str, spec: str | None, from_config: Any, protocol: type[Any]) -> Any:
    """The hook ``option`` names, or ``--llm-config``'s role; both at once is an error."""
    from benchmark.openenv_env.hooks import load_hook

    if spec and from_config is not None:
        role = "user" if option == "--user-sim" else "judge"
        raise ValueError(
            f"{option} and --llm-config's {role} role both set one; drop one (or set {role}: none)"
        )
    return load_hook(spec, protocol) if spec else from_config
