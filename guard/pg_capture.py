"""PostgreSQL capture triggers, installed once per schema and table set, outside any session (issue 15).

A shadow transaction learns its row changes from an AFTER row trigger on every watched table. Creating
that trigger inside each session's transaction (as before) takes a SHARE ROW EXCLUSIVE lock on the
table until the session ends, so concurrent sessions on one database queued behind each other. Now:

* The function ``<schema>.sg_capture()`` and a trigger ``sg_capture`` per table are created once, in a
  short transaction of their own, serialised between installers by an advisory lock, and left in
  place. Later sessions only read the catalog to see that they are there (no lock that conflicts
  with a writer).
* The function logs nothing unless the transaction set :data:`CAPTURE_SETTING` to ``on``
  (``set_config(..., true)``: transaction-local, gone at COMMIT or ROLLBACK). A writer that is not a
  shadow session pays one ``current_setting`` call per row and is otherwise unaffected.
* A shadow session logs into ``pg_temp._sg_changes``, a TEMP table of its own connection created
  ``ON COMMIT DROP``: private to the session, and never left behind by a crash.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from guard.backend import BackendError

CAPTURE_SETTING = "shadowguard.capture"
"""The transaction-local setting that turns the capture triggers on for one transaction."""
FUNCTION = "sg_capture"
TRIGGER = "sg_capture"
VERSION_MARK = "shadowguard capture v2"
"""Written in the function's body: an older (ungated) ``sg_capture`` is replaced."""
_ADVISORY_KEY = "shadowguard.capture.install"

_BODY = (
    f"BEGIN -- {VERSION_MARK}\n"
    f"IF current_setting('{CAPTURE_SETTING}', true) IS DISTINCT FROM 'on' THEN RETURN NULL; END IF;\n"
    # row_to_json, not to_jsonb: jsonb re-renders numbers inside json columns (3.6e16 becomes an
    # integer), while row_to_json keeps json values verbatim and renders float8 exactly.
    "INSERT INTO pg_temp._sg_changes (tbl, op, before, after) VALUES (TG_TABLE_NAME, lower(TG_OP), "
    "CASE WHEN TG_OP = 'INSERT' THEN NULL ELSE row_to_json(OLD) END, "
    "CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE row_to_json(NEW) END);\n"
    "RETURN NULL; END"
)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def missing(connection: sa.Connection, tables: Sequence[str]) -> tuple[str, list[str]]:
    """(the current schema, the tables without a current gated capture trigger): catalog reads only."""
    schema: str | None = connection.exec_driver_sql("SELECT current_schema()").scalar_one()
    if schema is None:
        raise BackendError("no current schema: the connection's search_path names no existing schema")
    rows = connection.execute(
        sa.text(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_proc p ON p.oid = t.tgfoid "
            "WHERE t.tgname = :trigger AND c.oid = ANY(CAST(:oids AS oid[])) AND strpos(p.prosrc, :mark) > 0"
        ),
        {
            "trigger": TRIGGER,
            "oids": [_oid(connection, name) for name in tables],
            "mark": VERSION_MARK,
        },
    )
    present = {str(r[0]) for r in rows}
    return str(schema), [name for name in tables if name not in present]


def _oid(connection: sa.Connection, table: str) -> int:
    oid = connection.execute(sa.text("SELECT CAST(to_regclass(:t) AS oid)"), {"t": _ident(table)}).scalar()
    if oid is None:
        raise BackendError(f"table {table!r} does not exist in the connection's search_path")
    return int(oid)


def _install(
    connection: sa.Connection, schema: str, tables: Sequence[str], lock_timeout_s: float | None
) -> None:
    run = connection.exec_driver_sql
    if lock_timeout_s is not None:
        run(f"SET LOCAL lock_timeout = {round(lock_timeout_s * 1000)}")
    connection.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": _ADVISORY_KEY})
    _, todo = missing(connection, tables)  # another installer may have finished while we waited
    if not todo:
        return
    function = f"{_ident(schema)}.{FUNCTION}"
    run(f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $sg$ {_BODY} $sg$")
    for name in todo:
        # Identifiers come from the SQLAlchemy metadata, never from a caller.
        run(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {_ident(name)}")
        run(
            f"CREATE TRIGGER {TRIGGER} AFTER INSERT OR UPDATE OR DELETE ON {_ident(name)} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()"
        )


def ensure_capture_triggers(
    connection: sa.Connection, tables: Sequence[str], lock_timeout_s: float | None
) -> None:
    """Install the gated capture function and triggers on ``tables`` where they are missing.

    Outside a transaction, the check and any install run in a transaction of their own, committed
    before this returns; inside the caller's transaction, they join it. Creating a trigger waits for
    the table's writers at most ``lock_timeout_s`` (PostgreSQL ``lock_timeout``), then raises the
    database's lock-timeout error: a retryable conflict, nothing installed.
    """
    if connection.in_transaction():
        schema, todo = missing(connection, tables)
        if todo:
            with connection.begin_nested():
                _install(connection, schema, tables, lock_timeout_s)
        return
    with connection.begin():
        schema, todo = missing(connection, tables)
        if todo:
            _install(connection, schema, tables, lock_timeout_s)
