"""The chaos trials' upstream database, read and prepared directly (not through the proxy).

``db`` is a SQLite file path, or a PostgreSQL URL whose ``options=-csearch_path=<schema>`` names the
schema of one run (:func:`pg_run_url` makes one; the notes fixture takes the same URL as ``--db``).
Every note write is counted by a trigger of the run into ``chaos_writes`` in the same transaction,
so a write applied twice shows.
"""

from __future__ import annotations

import sqlite3
import uuid
from urllib.parse import quote

import sqlalchemy as sa

from guard.pg_capture import VERSION_MARK

WRITES_TABLE = "chaos_writes"
_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS notes (id VARCHAR NOT NULL PRIMARY KEY, body VARCHAR NOT NULL, "
    "status VARCHAR NOT NULL);"
    "CREATE TABLE IF NOT EXISTS chaos_writes (id TEXT NOT NULL, op TEXT NOT NULL);"
    "CREATE TRIGGER IF NOT EXISTS chaos_count_insert AFTER INSERT ON notes BEGIN "
    "INSERT INTO chaos_writes (id, op) VALUES (NEW.id, 'insert'); END;"
    "CREATE TRIGGER IF NOT EXISTS chaos_count_update AFTER UPDATE ON notes BEGIN "
    "INSERT INTO chaos_writes (id, op) VALUES (NEW.id, 'update'); END;"
)
_PG_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS notes (id VARCHAR NOT NULL PRIMARY KEY, body VARCHAR NOT NULL, "
    "status VARCHAR NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chaos_writes (id TEXT NOT NULL, op TEXT NOT NULL)",
    "CREATE OR REPLACE FUNCTION chaos_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO chaos_writes (id, op) VALUES (NEW.id, lower(TG_OP)); RETURN NULL; END $$",
    "DROP TRIGGER IF EXISTS chaos_count ON notes",
    "CREATE TRIGGER chaos_count AFTER INSERT OR UPDATE ON notes FOR EACH ROW EXECUTE FUNCTION chaos_count()",
]


def is_pg(db: str) -> bool:
    return db.startswith("postgresql")


def pg_run_url(base: str) -> tuple[str, str]:
    """(url, schema): ``base`` with a new schema of its own as the search path."""
    schema = f"chaos_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}", schema


def _engine(db: str) -> sa.Engine:
    url = sa.make_url(db)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return sa.create_engine(url, poolclass=sa.NullPool)


def _schema_of(db: str) -> str:
    options = sa.make_url(db).query.get("options", "")
    return str(options).split("search_path=", 1)[1] if "search_path=" in str(options) else "public"


def prepare(db: str) -> None:
    """Create the notes table (the fixture's schema) and the write-counting trigger."""
    if not is_pg(db):
        lite = sqlite3.connect(db)
        try:
            lite.execute("PRAGMA journal_mode=WAL")
            lite.executescript(_SQLITE_SCHEMA)
            lite.commit()
        finally:
            lite.close()
        return
    engine = _engine(db)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{_schema_of(db)}"')
            for statement in _PG_SCHEMA:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def drop(db: str) -> None:
    """Drop a PostgreSQL run's schema (nothing for a SQLite file)."""
    if is_pg(db):
        engine = _engine(db)
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{_schema_of(db)}" CASCADE')
        finally:
            engine.dispose()


def _query(db: str, sql: str, params: dict[str, object]) -> list[tuple[object, ...]]:
    if is_pg(db):
        engine = _engine(db)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(sa.text(sql), params).all()]
        finally:
            engine.dispose()
    lite = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)
    try:
        return [tuple(r) for r in lite.execute(sql, params).fetchall()]
    finally:
        lite.close()


def read_state(db: str, prefix: str) -> tuple[set[str], dict[str, int], list[str]]:
    """(note ids starting with ``prefix``, writes applied per such note, orphaned capture objects)."""
    present = {str(r[0]) for r in _query(db, "SELECT id FROM notes WHERE id LIKE :p", {"p": prefix + "%"})}
    applied = {
        str(r[0]): int(str(r[1]))
        for r in _query(
            db,
            f"SELECT id, count(*) FROM {WRITES_TABLE} WHERE id LIKE :p GROUP BY id",  # noqa: S608
            {"p": prefix + "%"},
        )
    }
    if is_pg(db):
        orphans = [
            str(r[0])
            for r in _query(
                db,
                # The gated capture triggers stay installed by design (guard/pg_capture.py); an
                # ungated one, or a change log outside a session's TEMP schema, is left over.
                "SELECT tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc f ON f.oid = t.tgfoid "
                "WHERE n.nspname = :p AND tgname LIKE 'sg\\_%' AND strpos(f.prosrc, :mark) = 0 "
                "UNION ALL SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = :p AND table_name = '_sg_changes'",
                {"p": _schema_of(db), "mark": VERSION_MARK},
            )
        ]
    else:
        orphans = [
            str(r[0])
            for r in _query(
                db,
                "SELECT name FROM sqlite_master WHERE name LIKE :p ESCAPE '\\' OR name = '_sg_changes'",
                {"p": "sg\\_%"},
            )
        ]
    return present, applied, orphans


def present_count(db: str, notes: list[str]) -> int:
    marks = ",".join(f":n{i}" for i in range(len(notes)))
    rows = _query(
        db,
        f"SELECT count(*) FROM notes WHERE id IN ({marks})",  # noqa: S608 - only bind-parameter names
        {f"n{i}": n for i, n in enumerate(notes)},
    )
    return int(str(rows[0][0]))
