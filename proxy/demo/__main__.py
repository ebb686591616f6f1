"""``python -m proxy.demo`` (``make demo``): proxy up, scripted agent, proxy down, in one command.

Starts ``shadowguard serve --config proxy/demo/shadowguard.yaml`` in the background, waits until
``/readyz`` answers 200, runs :mod:`proxy.demo.client` against it, prints the audit log the run
wrote, and stops the proxy. Each run starts from the seed accounts: the demo app's database, the
audit log and the approval queue go to a fresh temporary folder, handed to the proxy through the
config's environment overrides (``SHADOWGUARD_UPSTREAMS``, ``SHADOWGUARD_AUDIT__PATH``,
``SHADOWGUARD_APPROVALS__STORE``, ``SHADOWGUARD_SESSIONS__STORE``, ``SHADOWGUARD_HTTP__PORT``), so
the config file itself stays what a person would run by hand. The client plays the reviewer too,
with a token made for this run only: the proxy is given its sha256 as the one approver
(``SHADOWGUARD_AUTH__REVIEWERS``), the client the token itself; neither is written anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from proxy.approvals.auth import hash_token
from proxy.config import ConfigError, ProxyConfig
from proxy.demo.client import NotReadyError, run, wait_ready
from proxy.demo.server import create_engine, prepare_database

CONFIG = Path(__file__).with_name("shadowguard.yaml")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
REVIEWER = "demo-reviewer"


def _serve_command(config: Path) -> list[str]:
    script = Path(sys.executable).with_name("shadowguard")
    if script.is_file():
        return [str(script), "serve", "--config", str(config)]
    return [sys.executable, "-c", "from proxy.cli import main; main()", "serve", "--config", str(config)]


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(host: str, port: int) -> bool:
    """Nothing listens on ``host:port`` (checked before starting: a readiness probe answered by some
    other process would otherwise pass for the demo proxy's)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _environment(config: ProxyConfig, folder: Path, port: int, reviewer_token: str) -> dict[str, str]:
    """The overrides: the run's own demo database, audit log and approval queue, the port, and the
    run's reviewer (``reviewer_token``'s hash as the only approver; any configured reviewers are replaced).

    The database is seeded here, once: the proxy starts one app process per agent session, and
    each of them must find the state the others committed.
    """
    database = folder / "accounts.sqlite"
    engine = create_engine(database)
    try:
        prepare_database(engine, reset=True)
    finally:
        engine.dispose()
    upstreams = []
    for upstream in config.upstreams:
        entry = upstream.model_dump(mode="json", exclude_defaults=True)
        if upstream.args[:2] == ["-m", "proxy.demo.server"]:
            entry["args"] = [*upstream.args, "--db", str(database)]
        upstreams.append(entry)
    return {
        **os.environ,
        "SHADOWGUARD_UPSTREAMS": json.dumps(upstreams),
        "SHADOWGUARD_AUDIT__PATH": str(folder / "audit.jsonl"),
        "SHADOWGUARD_APPROVALS__STORE": f"sqlite:///{folder / 'approvals.db'}",
        "SHADOWGUARD_SESSIONS__STORE": f"sqlite:///{folder / 'sessions.db'}",
        "SHADOWGUARD_AUTH__REVIEWERS": json.dumps(
            [{"name": REVIEWER, "role": "approver", "token_sha256": hash_token(reviewer_token)}]
        ),
        "SHADOWGUARD_HTTP__PORT": str(port),
    }


def _stop(proxy: subprocess.Popen[bytes]) -> int:
    if proxy.poll() is None:
        proxy.send_signal(signal.SIGINT)
        try:
            return proxy.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proxy.kill()
    return proxy.wait()


def _audit_summary(path: Path) -> str:
    if not path.is_file():
        return "audit log: none written"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = [f"audit log of this run ({len(records)} JSON lines; arguments as digests):"]
    for r in records:
        if r["kind"] == "call":
            rules = ", ".join(v["rule"] for v in r["violations"])
            approval = f"  approval {r['approval_state']}" if r.get("approval_id") else ""
            what = (
                f"{r['tool']:<15} {r['verdict']:<11} changes={r['changes']}"
                + (f"  [{rules}]" if rules else "")
                + approval
            )
        elif r["kind"] == "commit":
            what = (
                f"commit          {'committed' if r['committed'] else 'refused':<11} changes={r['changes']}"
            )
        elif r["kind"] == "approval_decision":
            decided = {"approve": "approved", "reject": "rejected"}.get(r["decision"], r["decision"])
            what = f"{r['tool']:<15} {decided:<11} by {r['reviewer']}: {r['reason']!r}"
        else:
            what = f"rollback        {r['reason']:<11} changes={r['changes']}"
        lines.append(f"  {str(r['session'])[:22]:<22} {what}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proxy.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="proxy config (default: the demo's)")
    parser.add_argument(
        "--port", type=int, default=None, help="HTTP port (default: the config's; 0: any free)"
    )
    parser.add_argument(
        "--mode", default="auto", help="protocol era for the client: auto, legacy, 2026-07-28"
    )
    options = parser.parse_args(argv)
    try:
        config = ProxyConfig.load(options.config)
    except ConfigError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    port = options.port if options.port is not None else config.http.port
    if port == 0:
        port = _free_port(config.http.host)
    elif not _port_free(config.http.host, port):
        print(
            f"demo: port {port} on {config.http.host} is already in use (another proxy or program listens "
            "there); stop it, or run on a free port: make demo DEMO_ARGS='--port 0'",
            file=sys.stderr,
        )
        return 1
    host = f"[{config.http.host}]" if ":" in config.http.host else config.http.host
    url = f"http://{host}:{port}/mcp"
    reviewer_token = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="shadowguard-demo-") as tmp:
        folder = Path(tmp)
        log = folder / "proxy.log"
        print(f"demo: starting the proxy ({' '.join(_serve_command(options.config)[1:])}) on {url}")
        with log.open("wb") as sink:
            proxy = subprocess.Popen(  # noqa: S603 - our own console script, fixed arguments
                _serve_command(options.config),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=_environment(config, folder, port, reviewer_token),
            )
            status = 1
            try:
                wait_ready(url, READY_TIMEOUT_S, alive=lambda: proxy.poll() is None)
                print("demo: the proxy is ready")
                status = anyio.run(lambda: run(url, reviewer_token=reviewer_token, mode=options.mode))
            except NotReadyError as exc:
                print(f"demo: {exc}", file=sys.stderr)
            finally:
                code = _stop(proxy)
        print("\n" + _audit_summary(folder / "audit.jsonl"))
        if status != 0 or code not in (0, -signal.SIGINT, 130):
            output = log.read_text(encoding="utf-8", errors="replace").strip()
            print(f"\ndemo: proxy exit status {code}; its output:\n{output or '(none)'}", file=sys.stderr)
            return status or 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
