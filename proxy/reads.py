"""The relayed reads: resources, resource templates, prompts and completion (see proxy/relay.py).

Reads need no guard session: they go to the upstream's shared connection. Resources keep their URIs
and are routed to the upstream that listed them, or whose resource template the URI fits; prompts
take the upstream's ``prefix``. :class:`Reads` keeps those routing tables (filled by every listing)
and the agents subscribed to each resource URI.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import mcp.types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from proxy.upstream_types import UpstreamError
from proxy.upstreams import Upstream, strip_reserved_meta

logger = logging.getLogger(__name__)

Ctx = ServerRequestContext[Any, Any]


def agent_connection(ctx: Ctx) -> Connection:
    """The agent's connection behind a request (its standalone channel outlives the request).

    The SDK reaches it only through the request's session object (``ServerSession._connection``).
    """
    connection: Connection = ctx.session._connection
    return connection


def forwarded_meta(ctx: Ctx, extra: Mapping[str, Any]) -> types.RequestParamsMeta | None:
    """The agent's ``_meta`` without reserved keys, plus what the relay adds (``extra``)."""
    meta = {**strip_reserved_meta(ctx.meta), **extra}
    return cast("types.RequestParamsMeta", meta) if meta else None


def offering(upstreams: Sequence[Upstream], what: str) -> list[Upstream]:
    """The upstreams whose capabilities include ``what`` (``resources``, ``prompts``, ...)."""
    return [u for u in upstreams if getattr(u.capabilities, what, None) is not None]


def _template_pattern(template: str) -> re.Pattern[str]:
    """A URI template (RFC 6570, the expressions resource templates use) as a whole-URI pattern."""
    parts: list[str] = []
    for piece in re.split(r"(\{[^}]*\})", template):
        if piece.startswith("{") and piece.endswith("}"):
            parts.append(".*" if piece[1:2] in ("+", "#") else "[^/?#]*")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


class Reads:
    """Routing and handlers of the relayed reads over ``upstreams`` (see the module docstring)."""

    def __init__(self, upstreams: Sequence[Upstream]) -> None:
        self.upstreams = list(upstreams)
        self.subscribers: dict[str, weakref.WeakSet[Connection]] = {}
        """Handshake-era agent connections subscribed to each resource URI."""
        self._subscribed: set[str] = set()
        self._resources: dict[str, Upstream] = {}
        self._templates: dict[str, Upstream] = {}
        self._patterns: dict[str, re.Pattern[str]] = {}
        self._prompts: dict[str, Upstream] = {}
        self._prompt_names: dict[str, str] = {}

    @staticmethod
    def subscribable(upstream: Upstream) -> bool:
        offered = upstream.capabilities.resources if upstream.capabilities is not None else None
        return bool(offered and offered.subscribe)

    async def _pages(
        self, upstream: Upstream, fetch: Callable[[Any, str | None], Awaitable[Any]], field: str
    ) -> list[Any]:
        connection = await upstream.shared_connection()
        items: list[Any] = []
        cursor: str | None = None
        async with connection.forwarding():
            while True:
                try:
                    page = await fetch(connection.client, cursor)
                except MCPError as exc:
                    connection.note(exc)
                    raise
                items += getattr(page, field)
                cursor = page.next_cursor
                if not cursor:
                    return items

    @staticmethod
    def _claim(owners: dict[str, Upstream], key: str, upstream: Upstream, what: str, strict: bool) -> bool:
        """Record ``upstream`` as the one serving ``key``; False (and a warning) if another does.

        ``strict`` (at startup): a clash is an :class:`UpstreamError` naming both and the fix.
        """
        owner = owners.setdefault(key, upstream)
        if owner is upstream:
            return True
        message = f"{what} {key!r} is served by upstreams {owner.name!r} and {upstream.name!r}"
        if strict:
            fix = (
                "give one of them a prefix in the config"
                if what == "prompt"
                else "resources keep their URIs, so leave one of them out of the config"
            )
            raise UpstreamError(f"{message}: {fix}")
        logger.warning("%s: only %r's is relayed", message, owner.name)
        return False

    async def list_resources_of(
        self, upstreams: list[Upstream], *, strict: bool = False
    ) -> list[types.Resource]:
        listed: list[types.Resource] = []
        for upstream in upstreams:
            pages = await self._pages(upstream, lambda c, cur: c.list_resources(cursor=cur), "resources")
            listed += [r for r in pages if self._claim(self._resources, r.uri, upstream, "resource", strict)]
        return listed

    async def list_templates_of(
        self, upstreams: list[Upstream], *, strict: bool = False
    ) -> list[types.ResourceTemplate]:
        listed: list[types.ResourceTemplate] = []
        for upstream in upstreams:
            pages = await self._pages(
                upstream, lambda c, cur: c.list_resource_templates(cursor=cur), "resource_templates"
            )
            for template in pages:
                if self._claim(self._templates, template.uri_template, upstream, "resource template", strict):
                    self._patterns.setdefault(template.uri_template, _template_pattern(template.uri_template))
                    listed.append(template)
        return listed

    def _owner_of(self, uri: str) -> Upstream:
        owner = self._resources.get(uri)
        if owner is not None:
            return owner
        for template, upstream in self._templates.items():
            if self._patterns[template].fullmatch(uri):
                return upstream
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"Unknown resource: {uri} (no upstream listed it or a resource template it fits)",
        )

    async def on_list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=await self.list_resources_of(offering(self.upstreams, "resources"))
        )

    async def on_list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = await self.list_templates_of(offering(self.upstreams, "resources"))
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def on_read_resource(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        upstream = self._owner_of(params.uri)
        connection = await upstream.shared_connection()
        async with connection.forwarding() as (_, extra):
            try:
                result = await connection.client.read_resource(params.uri, meta=forwarded_meta(ctx, extra))
            except MCPError as exc:
                connection.note(exc)
                raise
        return result.model_copy(update={"meta": strip_reserved_meta(result.meta) or None})

    async def on_subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        await self.subscribe_upstream(params.uri)
        self.subscribers.setdefault(params.uri, weakref.WeakSet()).add(agent_connection(ctx))
        return types.EmptyResult()

    async def on_unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        self.subscribers.get(params.uri, weakref.WeakSet()).discard(agent_connection(ctx))
        return types.EmptyResult()

    async def subscribe_upstream(self, uri: str) -> None:
        """Subscribe the owning upstream to ``uri`` once (its updates are fanned out to agents)."""
        upstream = self._owner_of(uri)
        if uri in self._subscribed:
            return
        connection = await upstream.shared_connection()
        if not self.subscribable(upstream) or connection.client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"upstream {upstream.name!r} offers no resources/subscribe for {uri} "
                "(the proxy subscribes handshake-era upstreams only; docs/proxy.md, 'Relay')",
            )
        request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
        await connection.session.send_request(request, types.EmptyResult)
        self._subscribed.add(uri)

    # -- prompts and completion -------------------------------------------------------------------
    async def list_prompts_of(self, upstreams: list[Upstream], *, strict: bool = False) -> list[types.Prompt]:
        listed: list[types.Prompt] = []
        for upstream in upstreams:
            for prompt in await self._pages(upstream, lambda c, cur: c.list_prompts(cursor=cur), "prompts"):
                exposed = upstream.prefix + prompt.name
                if self._claim(self._prompts, exposed, upstream, "prompt", strict):
                    self._prompt_names[exposed] = prompt.name
                    listed.append(
                        prompt if exposed == prompt.name else prompt.model_copy(update={"name": exposed})
                    )
        return listed

    def _prompt(self, exposed: str) -> tuple[Upstream, str]:
        upstream = self._prompts.get(exposed)
        if upstream is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {exposed}")
        return upstream, self._prompt_names[exposed]

    async def on_list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=await self.list_prompts_of(offering(self.upstreams, "prompts"))
        )

    async def on_get_prompt(self, ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        upstream, name = self._prompt(params.name)
        connection = await upstream.shared_connection()
        async with connection.forwarding() as (_, extra):
            try:
                result = await connection.client.get_prompt(
                    name, params.arguments, meta=forwarded_meta(ctx, extra)
                )
            except MCPError as exc:
                connection.note(exc)
                raise
        return result.model_copy(update={"meta": strip_reserved_meta(result.meta) or None})

    async def on_complete(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            upstream, name = self._prompt(ref.name)
            ref = ref.model_copy(update={"name": name})
        else:
            template_owner = self._templates.get(ref.uri)
            upstream = template_owner if template_owner is not None else self._owner_of(ref.uri)
        connection = await upstream.shared_connection()
        context = params.context.arguments if params.context is not None else None
        async with connection.forwarding():
            try:
                return await connection.client.complete(
                    ref, {"name": params.argument.name, "value": params.argument.value}, context
                )
            except MCPError as exc:
                connection.note(exc)
                raise


__all__ = ["Reads", "agent_connection", "forwarded_meta", "offering"]
