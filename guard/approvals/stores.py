"""Open the approval store a config names: one URL picks the backend."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from guard.approvals.models import ApprovalStore, utcnow
from guard.approvals.redis_store import RedisApprovalStore
from guard.approvals.sql import SqlApprovalStore
from guard.approvals.transitions import Clock, redact_url


def open_approval_store(url: str, *, clock: Clock = utcnow, base_dir: Path | None = None) -> ApprovalStore:
    """The store named by ``url`` (``approvals.store`` in the config), opened and ready.

    - ``sqlite:///relative.db`` — a SQLite file resolved against ``base_dir`` (the config's folder;
      None: the working directory); ``sqlite:////abs/path.db`` for an absolute path. Several processes
      may share the file (WAL mode, busy timeout). ``sqlite:///:memory:`` is refused: not durable, not
      shared.
    - ``postgresql://user:pass@host:port/db`` — PostgreSQL (psycopg 3).
    - Both SQL URLs take ``?table_prefix=name_`` (default ``shadowguard_``): the tables are
      ``<prefix>approvals`` and ``<prefix>approval_events``, so separate queues or test runs can share
      a database.
    - ``redis://host:port/db`` (``rediss://`` for TLS) — Redis; several proxy replicas share one queue.
      ``?prefix=...`` (default ``shadowguard:approvals:``) is the key prefix, removed from the URL
      before redis-py sees it; other query parameters go to redis-py.

    Raises :class:`ValueError` for a URL that names no supported store (the message shows the URL
    without its password) and :class:`~guard.approvals.models.ApprovalStoreUnavailable` when the
    server or file cannot be reached.
    """
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    backend = scheme.partition("+")[0]
    if backend in ("sqlite", "postgresql"):
        return SqlApprovalStore(url, clock=clock, base_dir=base_dir)
    if scheme in ("redis", "rediss"):
        return RedisApprovalStore(url, clock=clock)
    raise ValueError(
        f"approval store {redact_url(url)}: unknown scheme {scheme or '(none)'!r};"
        " use sqlite:///file.db, postgresql://... or redis://host:port/db"
    )
