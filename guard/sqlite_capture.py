"""SQLite capture triggers, installed once per DBAPI connection and table set, gated per session (issue 16).

SQLite keeps the capture in TEMP objects, private to one connection: the change log ``temp._sg_changes``
and three row triggers per watched table. Creating and dropping them for every shadow session cost a
third of a benchmark attempt, so now (as on PostgreSQL, ``guard/pg_capture.py``):

* The log and the triggers are created when a session begins on a connection that lacks them, and
  then left in place. Whether they are there is read from ``sqlite_temp_master`` at every begin, so
  a new or reopened DBAPI connection, or DDL undone by a rollback, gets them again.
* Each trigger fires only ``WHEN sg_capture_on('<tag>')``: a Python function registered on the
  connection that answers 1 only while a session watching that table definition is active on it.
  Writes outside a session (an environment's setup, another backend's tables) are not logged.
* A trigger's name and tag carry a digest of the table's definition, so two backends on one
  connection whose table sets differ (or define one table differently) each log only their own.
* A session's log rows are deleted when it commits (inside its transaction); a rollback undoes them.
* DDL run inside a transaction is undone with it. A caller that keeps a connection across transactions
  it always rolls back (the benchmark's pooled attempt databases, ``benchmark/envs/store.py``) calls
  :func:`ensure_capture` before beginning, so the triggers are created once per connection.
"""

from __future__ import annotations

import functools
import hashlib
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from guard.backend import BackendError

LOG = "_sg_changes"
REAL_TEXT = "sg_real_text"
GATE = "sg_capture_on"
_INFO_KEY = "shadowguard.sqlite_capture"
_LOG_DDL = (
    f"CREATE TEMP TABLE IF NOT EXISTS {LOG} "
    "(id INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, op TEXT NOT NULL, before TEXT, after TEXT)"
)


def _real_text(value: object) -> object:
    """SQLite renders REAL values in JSON with 15 significant digits; the row images must carry the
    stored double exactly, so REAL values go through Python's shortest round-trip repr."""
    return repr(value) if isinstance(value, float) else value


@dataclass(frozen=True)
class TableCapture:
    """One table's capture: the tag its triggers are gated on, and their names and DDL."""

    tag: str
    triggers: tuple[tuple[str, str], ...]
    """(trigger name, CREATE TEMP TRIGGER statement) for insert, update and delete."""


def _image(alias: str, table: sa.Table) -> str:
    parts = []
    for c in table.columns:
        value = f'{alias}."{c.name}"'
        if isinstance(c.type, sa.Float | sa.Double):
            value = f"{REAL_TEXT}({value})"
        elif isinstance(c.type, sa.JSON):
            # a bare JSON number is stored as REAL (the column has NUMERIC affinity)
            value = f"json({REAL_TEXT}({value}))"
        parts.append(f"'{c.name}', {value}")
    return f"json_object({', '.join(parts)})"


@functools.lru_cache(maxsize=256)
def table_capture(table: sa.Table) -> TableCapture:
    """The gated capture triggers of ``table`` (built once per table: sessions reuse the text)."""
    name = table.name
    images = (
        ("insert", "NULL", _image("NEW", table)),
        ("update", _image("OLD", table), _image("NEW", table)),
        ("delete", _image("OLD", table), "NULL"),
    )
    digest = hashlib.sha256(repr((name, images)).encode()).hexdigest()[:12]
    tag = f"{name}:{digest}"
    triggers = []
    for op, before, after in images:
        trigger = f"sg_{op}_{name}_{digest}"
        # Identifiers come from the SQLAlchemy metadata, never from a caller.
        triggers.append(
            (
                trigger,
                f'CREATE TEMP TRIGGER IF NOT EXISTS "{trigger}" AFTER {op.upper()} ON main."{name}" '  # noqa: S608
                f"WHEN {GATE}('{tag}') "
                f"BEGIN INSERT INTO {LOG} (tbl, op, before, after) "
                f"VALUES ('{name}', '{op}', {before}, {after}); END",
            )
        )
    return TableCapture(tag=tag, triggers=tuple(triggers))


@dataclass
class ConnectionCapture:
    """The capture state of one DBAPI connection: which tags have an active session (a count, so
    that nested or overlapping sessions on one connection end independently)."""

    raw: Any
    active: Counter[str] = field(default_factory=Counter)

    def gate(self, tag: object) -> int:
        return 1 if self.active[str(tag)] > 0 else 0


def connection_capture(connection: sa.Connection) -> ConnectionCapture:
    """The state of ``connection``'s current DBAPI connection, registering the SQL functions the
    triggers call the first time this DBAPI connection is seen."""
    raw = connection.connection.dbapi_connection
    if raw is None:
        raise BackendError("the SQLite connection is closed")
    info = connection.info
    state = info.get(_INFO_KEY)
    if isinstance(state, ConnectionCapture) and state.raw is raw:
        return state
    state = ConnectionCapture(raw)
    raw.create_function(REAL_TEXT, 1, _real_text, deterministic=True)
    raw.create_function(GATE, 1, state.gate)
    info[_INFO_KEY] = state
    return state


def capture_active(connection: sa.Connection) -> bool:
    """Whether a session still has capture on for ``connection``'s current DBAPI connection (one that
    began and neither committed nor rolled back). Registers nothing."""
    state = connection.info.get(_INFO_KEY)
    if not isinstance(state, ConnectionCapture) or state.raw is not connection.connection.dbapi_connection:
        return False
    return any(count > 0 for count in state.active.values())


def ensure_capture(connection: sa.Connection, tables: Sequence[sa.Table]) -> tuple[str, ...]:
    """Create the log and the gated triggers of ``tables`` where missing; return the tables' tags.

    One catalog read when everything is in place. The DDL runs in the connection's current
    transaction, if any (a rollback of it removes the DDL, and the next call creates it again). The
    statements go to the DBAPI cursor directly: they are ours, constant per table, and SQLAlchemy's
    per-statement work was a third of their cost.
    """
    state = connection_capture(connection)
    captures = [table_capture(t) for t in tables]
    cursor = state.raw.cursor()
    try:
        cursor.execute("SELECT name FROM sqlite_temp_master WHERE type IN ('table', 'trigger')")
        present = {str(r[0]) for r in cursor.fetchall()}
        if LOG not in present:
            cursor.execute(_LOG_DDL)
        for capture in captures:
            for trigger, ddl in capture.triggers:
                if trigger not in present:
                    cursor.execute(ddl)
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(None, None, exc, sqlite3.Error) from exc
    finally:
        cursor.close()
    return tuple(c.tag for c in captures)
