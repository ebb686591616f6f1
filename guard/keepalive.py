"""HTTP keep-alive, in one place for every server and client pool of the project (issue 15).

A server that closes an idle connection at the moment a client takes it from its pool and sends on
it loses that request: the client reads a reset (``httpx.ReadError``) and cannot know whether the
request was received. uvicorn's default keep-alive (5 s) equals httpx's pool expiry (5 s), so on a
loaded machine, whose event loops run late, that race is lost now and then. The rule that removes it:
**a server keeps an idle connection open much longer than any client keeps it in its pool.**

* ``shadowguard serve``, ``shadowguard env serve`` and the notes fixture keep idle connections for
  :data:`SERVER_KEEP_ALIVE_S` (uvicorn ``timeout_keep_alive``), far beyond the 5 s pool expiry of
  httpx, the MCP SDK's client and most others.
* The proxy's pool for HTTP upstreams lets go of an idle connection after
  :data:`CLIENT_KEEPALIVE_EXPIRY_S`, under uvicorn's default, so an upstream the project does not
  run on uvicorn's defaults never closes a connection the proxy may still reuse.
"""

from __future__ import annotations

SERVER_KEEP_ALIVE_S = 75
"""Seconds a server of the project keeps an idle HTTP connection open (uvicorn ``timeout_keep_alive``)."""

CLIENT_KEEPALIVE_EXPIRY_S = 4.0
"""Seconds the proxy keeps an idle connection to an HTTP upstream in its pool."""
