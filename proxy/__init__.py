"""The MCP session proxy: agents connect here, every tool call goes through the guard, the upstream MCP
servers do the work. It imports the guard; it reaches the benchmark only to mount its command groups
(proxy.cli._mount_benchmark, docs/adr/001-cli-composition.md). The names below are its public API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.exports import lazy_exports

if TYPE_CHECKING:
    from proxy.app import create_app as create_app
    from proxy.cli import main as main
    from proxy.config import ConfigError as ConfigError
    from proxy.config import ProxyConfig as ProxyConfig
    from proxy.serve import run_http as run_http
    from proxy.serve import run_stdio as run_stdio
    from proxy.server import GuardProxy as GuardProxy
    from proxy.upstream_types import UpstreamError as UpstreamError

__all__ = [
    "ConfigError",
    "GuardProxy",
    "ProxyConfig",
    "UpstreamError",
    "create_app",
    "main",
    "run_http",
    "run_stdio",
]

_EXPORTS: dict[str, str] = {
    "GuardProxy": "proxy.server",
    "UpstreamError": "proxy.upstream_types",
    "ProxyConfig": "proxy.config",
    "ConfigError": "proxy.config",
    "create_app": "proxy.app",
    "run_http": "proxy.serve",
    "run_stdio": "proxy.serve",
    "main": "proxy.cli",
}
"""Public name -> the module defining it. Imported on first use, so that importing one submodule
(or running the console script) does not import the whole package."""

__getattr__ = lazy_exports(__name__, _EXPORTS, __all__)
