"""The HTTP client the benchmark's MCP clients use: the MCP transports' default timeouts (30 s to connect,
write and wait for a pooled connection; 300 s to read, as a server may hold a response stream open), built
on the public ``httpx2`` API instead of the SDK's private factory."""

from __future__ import annotations

import httpx2

__all__ = ["CONNECT_S", "READ_S", "mcp_http_client"]

CONNECT_S = 30.0
READ_S = 300.0


def mcp_http_client(headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """A new client (use it as an async context manager) with the transports' timeouts."""
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(CONNECT_S, read=READ_S))
