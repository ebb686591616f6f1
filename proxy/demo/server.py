"""The demo accounts app: an MCP tool server over stdio, its state in SQLite through SQLAlchemy.

Three tools, each declaring what it does in its MCP annotations:

* ``list_accounts`` - read (``readOnlyHint``)
* ``rename_account`` - a reversible write (``destructiveHint: false``, idempotent)
* ``transfer_funds`` - an irreversible write (``destructiveHint: true``): money leaves an account

Like many real systems, the app itself checks only what it must (the accounts exist, the amount is
positive); the business rules (no overdraft, frozen accounts, large transfers) are the policy pack's
(policies/example). The server takes part in the guard's transaction extension
(docs/transaction-extension.md) with :class:`guard.txext.TransactionParticipant`, so the proxy runs
an agent's writes in a shadow transaction on this database and reads their row-level changes.

Sessions: ``_meta["shadowguard/session"]`` when the client sends one (a guard multiplexing several
sessions over one connection), else the stdio connection's own. Each session has its own database
connection; without a transaction a tool call commits at once, inside one it runs in a savepoint of it.
The database is a SQLite file (``--db``, default ``<tmp>/shadowguard-demo/accounts.sqlite``) that
several server processes may share; it is created and seeded when missing (``--reset`` re-seeds it).
Money is stored in integer cents.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp.types as types
import sqlalchemy as sa
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from sqlalchemy.pool import NullPool

from guard.backend import Backend
from guard.sql_backend import SqlBackend, concurrent_writers
from guard.txext.participant import TransactionParticipant

SESSION_META_KEY = "shadowguard/session"
STDIO_SESSION = "stdio"
MAX_SESSIONS = 64
DEFAULT_DB = Path(tempfile.gettempdir()) / "shadowguard-demo" / "accounts.sqlite"
CURRENCY = "EUR"
MAX_AMOUNT_CENTS = 100_000_000_00

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")

metadata = sa.MetaData()
accounts = sa.Table(
    "accounts",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("status", sa.String, nullable=False),  # active | frozen
    sa.Column("balance_cents", sa.Integer, nullable=False),
)
transfers = sa.Table(
    "transfers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("from_account", sa.String, sa.ForeignKey("accounts.id"), nullable=False),
    sa.Column("to_account", sa.String, sa.ForeignKey("accounts.id"), nullable=False),
    sa.Column("amount_cents", sa.Integer, nullable=False),
    sa.Column("memo", sa.String, nullable=False),
    sa.Column("created_at", sa.String, nullable=False),
)
TABLES = (accounts, transfers)

SEED = (
    {
        "id": "acc-alice",
        "owner": "Alice Martin",
        "name": "Everyday",
        "status": "active",
        "balance_cents": 125000,
    },
    {"id": "acc-bob", "owner": "Bob Chen", "name": "Savings", "status": "active", "balance_cents": 31000},
    {"id": "acc-carol", "owner": "Carol Diaz", "name": "Joint", "status": "frozen", "balance_cents": 8000},
)

_ACCOUNT_ID = {
    "type": "string",
    "description": "Account id, e.g. acc-alice.",
    "minLength": 1,
    "maxLength": 64,
}

TOOLS = [
    types.Tool(
        name="list_accounts",
        title="List accounts",
        description="All accounts with owner, display name, status (active or frozen) and balance.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        annotations=types.ToolAnnotations(
            read_only_hint=True, idempotent_hint=True, open_world_hint=False, title="List accounts"
        ),
    ),
    types.Tool(
        name="rename_account",
        title="Rename an account",
        description="Change an account's display name. Reversible: rename it back to undo.",
        input_schema={
            "type": "object",
            "properties": {
                "account_id": _ACCOUNT_ID,
                "name": {
                    "type": "string",
                    "description": "New display name.",
                    "minLength": 1,
                    "maxLength": 80,
                },
            },
            "required": ["account_id", "name"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
            title="Rename an account",
        ),
    ),
    types.Tool(
        name="transfer_funds",
        title="Transfer funds",
        description=(
            f"Move money ({CURRENCY}, at most 2 decimals) from one account to another. "
            "Irreversible: the money is booked at once."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "from_account": _ACCOUNT_ID,
                "to_account": _ACCOUNT_ID,
                "amount": {"type": "number", "exclusiveMinimum": 0, "description": f"Amount in {CURRENCY}."},
                "memo": {"type": "string", "description": "What the transfer is for.", "maxLength": 200},
            },
            "required": ["from_account", "to_account", "amount", "memo"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=False,
            title="Transfer funds",
        ),
    ),
]
_SCHEMAS = {t.name: t.input_schema for t in TOOLS}


class ToolError(Exception):
    """A call the app refuses; the agent gets the message as a tool error (``isError``)."""


# -- database -------------------------------------------------------------------------------------------


def create_engine(path: Path) -> sa.Engine:
    """A SQLite file engine with real BEGIN/SAVEPOINT handling (pysqlite's implicit transactions break
    SAVEPOINT; SQLAlchemy's documented fix is to turn them off and emit BEGIN ourselves).

    The file is in WAL mode, so that one session's open shadow transaction never blocks another
    session's reads, nor (through its read lock, in rollback-journal mode) another session's commit.
    Connections may move between worker threads; a session's lock keeps them to one at a time.
    """

    def connect() -> sqlite3.Connection:
        raw = sqlite3.connect(str(path), timeout=10.0, check_same_thread=False)
        raw.isolation_level = None
        raw.execute("PRAGMA journal_mode = WAL")
        raw.execute("PRAGMA foreign_keys = ON")
        return raw

    engine = sa.create_engine("sqlite://", creator=connect, poolclass=NullPool)

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def prepare_database(engine: sa.Engine, *, reset: bool = False) -> None:
    """Create the tables and the seed accounts if missing; ``reset`` puts the seed state back."""
    with engine.begin() as conn:
        metadata.create_all(conn)
        if reset:
            conn.execute(transfers.delete())
            conn.execute(accounts.delete())
        present = {row[0] for row in conn.execute(sa.select(accounts.c.id))}
        missing = [row for row in SEED if row["id"] not in present]
        if missing:
            conn.execute(accounts.insert(), missing)


# -- tools ------------------------------------------------------------------------------------------------


def _money(cents: int) -> str:
    return f"{cents / 100:.2f}"


def _account_view(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "owner": row["owner"],
        "name": row["name"],
        "status": row["status"],
        "balance": _money(int(row["balance_cents"])),
        "currency": CURRENCY,
    }


def _string(arguments: Mapping[str, Any], name: str, *, max_length: int) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value:
        raise ToolError(f"{name} must be a non-empty string")
    if len(value) > max_length:
        raise ToolError(f"{name} must be at most {max_length} characters")
    return value


def _cents(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError("amount must be a number")
    number: float = value
    cents = round(number * 100)
    if abs(number * 100 - cents) > 1e-6:
        raise ToolError("amount must have at most 2 decimals")
    if cents <= 0:
        raise ToolError("amount must be positive")
    if cents > MAX_AMOUNT_CENTS:
        raise ToolError(f"amount must be at most {_money(MAX_AMOUNT_CENTS)}")
    return cents


def _unexpected(arguments: Mapping[str, Any], tool: str) -> None:
    allowed = set(_SCHEMAS[tool].get("properties", {}))
    extra = sorted(set(arguments) - allowed)
    if extra:
        raise ToolError(f"unknown argument(s) {extra}; {tool} takes {sorted(allowed) or 'none'}")


def _account(conn: sa.Connection, account_id: str) -> Mapping[str, Any]:
    row = conn.execute(sa.select(accounts).where(accounts.c.id == account_id)).mappings().first()
    if row is None:
        raise ToolError(f"Unknown account: {account_id}")
    return dict(row)


def list_accounts(conn: sa.Connection, arguments: Mapping[str, Any]) -> dict[str, Any]:
    _unexpected(arguments, "list_accounts")
    rows = conn.execute(sa.select(accounts).order_by(accounts.c.id)).mappings().all()
    return {"accounts": [_account_view(dict(r)) for r in rows]}


def rename_account(conn: sa.Connection, arguments: Mapping[str, Any]) -> dict[str, Any]:
    _unexpected(arguments, "rename_account")
    account_id = _string(arguments, "account_id", max_length=64)
    name = _string(arguments, "name", max_length=80)
    _account(conn, account_id)
    conn.execute(accounts.update().where(accounts.c.id == account_id).values(name=name))
    return {"account": _account_view(_account(conn, account_id))}


def transfer_funds(conn: sa.Connection, arguments: Mapping[str, Any]) -> dict[str, Any]:
    _unexpected(arguments, "transfer_funds")
    source = _string(arguments, "from_account", max_length=64)
    target = _string(arguments, "to_account", max_length=64)
    memo = arguments.get("memo")
    if not isinstance(memo, str) or len(memo) > 200:
        raise ToolError("memo must be a string of at most 200 characters")
    cents = _cents(arguments.get("amount"))
    if source == target:
        raise ToolError("from_account and to_account must differ")
    _account(conn, source)
    _account(conn, target)
    balance = accounts.c.balance_cents
    conn.execute(accounts.update().where(accounts.c.id == source).values(balance_cents=balance - cents))
    conn.execute(accounts.update().where(accounts.c.id == target).values(balance_cents=balance + cents))
    booked = datetime.now(UTC).isoformat(timespec="seconds")
    inserted = conn.execute(
        transfers.insert().values(
            from_account=source, to_account=target, amount_cents=cents, memo=memo, created_at=booked
        )
    )
    key = inserted.inserted_primary_key
    return {
        "transfer": {
            "id": key[0] if key else None,
            "from_account": source,
            "to_account": target,
            "amount": _money(cents),
            "currency": CURRENCY,
            "memo": memo,
        },
        "from": _account_view(_account(conn, source)),
        "to": _account_view(_account(conn, target)),
    }


ToolFn = Callable[[sa.Connection, Mapping[str, Any]], dict[str, Any]]
HANDLERS: dict[str, ToolFn] = {
    "list_accounts": list_accounts,
    "rename_account": rename_account,
    "transfer_funds": transfer_funds,
}


# -- sessions ---------------------------------------------------------------------------------------------


@dataclass
class _Session:
    """One client session: its own connection and shadow-transaction backend, used one call at a time."""

    backend: SqlBackend
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0

    @property
    def connection(self) -> sa.Connection:
        return self.backend.connection


class AccountsServer:
    """The MCP server of the accounts app (low-level ``Server``: exact schemas and annotations)."""

    def __init__(self, engine: sa.Engine, *, max_sessions: int = MAX_SESSIONS) -> None:
        self.engine = engine
        self.max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
        self.server: Server[Any] = Server(
            "shadowguard-demo-accounts",
            version="1",
            title="Demo accounts",
            description="A tiny accounts app for the shadowguard quickstart.",
            get_tool_input_schema=_SCHEMAS.get,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.transactions = TransactionParticipant(
            session_key=self.session_key,
            access=self._access,
            writers=concurrent_writers(engine.dialect.name),
        )
        self.transactions.install(self.server)

    @staticmethod
    def session_key(ctx: Ctx) -> str:
        meta: Mapping[str, Any] = ctx.meta or {}
        if SESSION_META_KEY not in meta:
            return STDIO_SESSION
        value = meta[SESSION_META_KEY]
        if not isinstance(value, str) or not value or len(value) > 256:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"_meta[{SESSION_META_KEY!r}] must be a non-empty string of at most 256 characters",
            )
        return "meta:" + value

    def _session(self, key: str) -> _Session:
        """The session's state, opened on first use (on the event loop: no await between lookup and use)."""
        session = self._sessions.get(key)
        if session is None:
            if len(self._sessions) >= self.max_sessions:
                self._evict_idle()
            # created_at is a wall-clock stamp: bookkeeping, left out of row images so that an approved
            # transfer run minutes after its rehearsal still matches the preview the reviewer saw.
            session = self._sessions[key] = _Session(
                SqlBackend(self.engine.connect(), TABLES, hidden={"created_at"})
            )
        return session

    def _evict_idle(self) -> None:
        """Close the oldest session with no open transaction and no call in flight, to make room."""
        for key, session in self._sessions.items():
            if session.users == 0 and not session.connection.in_transaction():
                del self._sessions[key]
                session.connection.close()
                return
        raise MCPError(
            code=types.INVALID_REQUEST,
            message=f"too many sessions ({self.max_sessions}) in a transaction; commit or roll back one",
        )

    async def _run(self, key: str, work: Callable[[_Session], T]) -> T:
        session = self._session(key)
        session.users += 1
        try:
            async with session.lock:
                return await anyio.to_thread.run_sync(work, session)
        finally:
            session.users -= 1

    async def _access(self, key: str, work: Callable[[Backend], T], /) -> T:
        return await self._run(key, lambda session: work(session.backend))

    async def _list_tools(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def _call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        handler = HANDLERS.get(params.name)
        if handler is None:
            return _error_result(f"Unknown tool: {params.name}")
        key, tx = self.session_key(ctx), self.transactions.transaction_of(ctx)
        arguments = dict(params.arguments or {})

        def run(session: _Session) -> dict[str, Any]:
            with self.transactions.calling(key, tx, session.backend):
                conn = session.connection
                # Inside the guard's transaction a call gets a savepoint, so a refused call leaves
                # nothing behind; outside one it is its own transaction and commits at once.
                scope = conn.begin_nested() if conn.in_transaction() else conn.begin()
                with scope:
                    return handler(conn, arguments)

        try:
            result = await self._run(key, run)
        except ToolError as exc:
            return _error_result(str(exc))
        except sa.exc.DBAPIError as exc:
            return _error_result(f"database error (nothing was changed): {exc.orig}")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
            is_error=False,
        )

    def close(self) -> None:
        for session in self._sessions.values():
            session.connection.close()
        self._sessions.clear()
        self.engine.dispose()

    async def serve_stdio(self) -> None:
        """Serve one stdio connection (either protocol era) until stdin closes."""
        try:
            async with stdio_server() as (read_stream, write_stream):
                await self.server.run(read_stream, write_stream, self.server.create_initialization_options())
        finally:
            self.close()


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m proxy.demo.server", description="The shadowguard demo accounts app (MCP over stdio)."
    )
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"SQLite file (default {DEFAULT_DB})")
    parser.add_argument("--reset", action="store_true", help="put the seed accounts back before serving")
    options = parser.parse_args(argv)
    options.db.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(options.db)
    prepare_database(engine, reset=options.reset)
    anyio.run(AccountsServer(engine).serve_stdio)


if __name__ == "__main__":
    main()
