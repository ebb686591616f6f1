"""Bounded waits for the PostgreSQL databases the proxy keeps its own state in (the approval store,
the session ledger), so that a database that stops answering is an error the caller sees and maps
(``approvals_unavailable``, a ledger error), not a call that hangs.

By default libpq waits as long as the operating system lets it: a server that accepts TCP but never
answers the startup exchange holds a connect forever; a network that drops packets holds a sent
query until TCP gives up (about 15 minutes on Linux); a lock held by a stuck peer (another replica's
open transaction) holds a statement for as long as the peer lives. :func:`pg_connect_args` bounds
each, unless the URL sets that parameter itself (the URL's value is used):

======================  ============================================================================
``connect_timeout``     10 s for the whole connection start (TCP and the startup exchange)
``tcp_user_timeout``    30 s: data sent and not acknowledged (a partition) ends the connection
``keepalives...``       on; 10 s idle, 5 s apart, 3 probes: a pooled connection to a host that went
                        away is found dead before it is used
``options``             ``-c lock_timeout=10s -c statement_timeout=30s``: a lock wait or a statement
                        on a live server (the stores' statements are single-row and short)
======================  ============================================================================
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

CONNECT_TIMEOUT_S = 10
TCP_USER_TIMEOUT_MS = 30_000
LOCK_TIMEOUT = "10s"
STATEMENT_TIMEOUT = "30s"


def pg_connect_args(url: sa.URL) -> dict[str, Any]:
    """libpq parameters bounding every wait (module docstring), less those ``url`` sets itself."""
    bounds: dict[str, Any] = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "options": f"-c lock_timeout={LOCK_TIMEOUT} -c statement_timeout={STATEMENT_TIMEOUT}",
    }
    return {key: value for key, value in bounds.items() if key not in url.query}


__all__ = ["CONNECT_TIMEOUT_S", "pg_connect_args"]
