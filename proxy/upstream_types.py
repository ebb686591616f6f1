"""What the proxy reads of an upstream's settings, and the errors an upstream is reported with (the
contract :mod:`proxy.upstreams` and :mod:`proxy.upstream_connection` build on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from guard.backend import BackendError


class UpstreamSettings(Protocol):
    """What the proxy reads from one ``upstreams:`` entry of the config (proxy.config)."""

    @property
    def name(self) -> str: ...
    @property
    def transport(self) -> str: ...
    @property
    def command(self) -> str | None: ...
    @property
    def args(self) -> Sequence[str]: ...
    @property
    def env(self) -> Mapping[str, str] | None: ...
    @property
    def url(self) -> str | None: ...
    @property
    def prefix(self) -> str | None: ...
    @property
    def transactional(self) -> Any: ...
    @property
    def policy(self) -> Path | str | None: ...
    @property
    def pass_env(self) -> Sequence[str]: ...
    @property
    def sql_tools(self) -> Mapping[str, Any]: ...
    @property
    def detect_sql_tools(self) -> bool: ...


class UpstreamError(Exception):
    """An upstream could not be used as configured (the message names the upstream and why)."""


class UpstreamGoneError(UpstreamError, BackendError):
    """The connection to an upstream is closed: the process exited or the server went away.

    Whatever the upstream held for the connection (an open transaction included) is gone with it.
    It is a :class:`~guard.backend.BackendError` too: the guard does not classify and retry it as a
    failed call (there is no connection to retry on); it ends the session's transaction.
    """


__all__ = ["UpstreamError", "UpstreamGoneError", "UpstreamSettings"]
