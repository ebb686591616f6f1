"""``shadowguard bench stub-llm``: serve the scripted OpenAI-compatible test double (benchmark.llm.stub)."""

from __future__ import annotations

import socket
import sys
from typing import Annotated

import typer
import uvicorn
from rich.console import Console

from benchmark.envs import DOMAINS, EnvError
from benchmark.llm.stub import MODEL, POLICIES, Policy, StubBrain, api_key_from, create_app
from benchmark.tasks import resolve_data

ANNOUNCE = "stub-llm (scripted test double): listening on"


def serve(app: object, host: str, port: int) -> None:
    """Serve ``app`` until interrupted; ``port`` 0 picks a free port. The URL goes to stderr."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(512)
        bound = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))  # type: ignore[arg-type]
        print(f"{ANNOUNCE} http://{host}:{bound}/v1", file=sys.stderr, flush=True)
        server.run(sockets=[sock])
    finally:
        sock.close()


def register(app: typer.Typer) -> None:
    """Add ``stub-llm`` to ``app`` (the ``bench`` group)."""

    @app.command("stub-llm")
    def stub_llm(
        policy: Annotated[
            str, typer.Option("--policy", help=f"The agent's script: {', '.join(POLICIES)}.")
        ] = "correct-on-hint",
        ask_first: Annotated[
            bool, typer.Option("--ask-first", help="Ask the user one question before the first call.")
        ] = False,
        judge_answer: Annotated[str, typer.Option("--judge-answer", help="The judge's answer.")] = "Yes",
        api_key_env: Annotated[
            str | None,
            typer.Option("--api-key-env", help="Require this variable's value as the bearer token."),
        ] = None,
        host: Annotated[str, typer.Option(help="Bind address.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port (0: any free port; the URL goes to stderr).")] = 8800,
        data: Annotated[str | None, typer.Option("--data", help="Benchmark data (see README).")] = None,
        domain: Annotated[
            list[str] | None, typer.Option("--domain", help="Load only these domains (repeatable; faster).")
        ] = None,
    ) -> None:
        """Serve a scripted OpenAI-compatible chat endpoint: a TEST DOUBLE that replays golden calls
        (with one injected fault it corrects on a guard hint), for tests and demos; never a model."""
        console = Console(stderr=True)
        if policy not in POLICIES:
            console.print(
                f"[red]error:[/red] --policy: unknown policy {policy!r}; known: {', '.join(POLICIES)}"
            )
            raise typer.Exit(2)
        unknown = [d for d in domain or [] if d not in DOMAINS]
        if unknown:
            console.print(f"[red]error:[/red] --domain: unknown domain(s) {', '.join(unknown)}")
            raise typer.Exit(2)
        try:
            key = api_key_from(api_key_env)
            bench = resolve_data(data)
        except (ValueError, EnvError) as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from exc

        def brain() -> StubBrain:
            chosen = _policy(policy)
            domains = tuple(domain or ())
            return StubBrain(bench, chosen, ask_first=ask_first, judge_answer=judge_answer, domains=domains)

        console.print(f"{MODEL}: policy {policy}{' (ask first)' if ask_first else ''}", highlight=False)
        serve(create_app(brain, key), host, port)


def _policy(name: str) -> Policy:
    for known in POLICIES:
        if known == name:
            return known
    raise ValueError(name)
