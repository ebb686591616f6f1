"""A policy pack is compiled again against its upstream's tools when the proxy starts: a v2 pack's
``args`` get the tools' schema types, and a rule naming an argument the tool lacks fails at start-up,
not at the first call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.config import UpstreamConfig
from proxy.upstream_types import UpstreamError
from proxy.upstreams import Upstream

pytestmark = pytest.mark.anyio


PACK = """\
version: 2
name: notes
tables: {notes: notes}
tools:
  get_note: read
  put_note: write
rules:
  - id: notes.no_secret_drafts
    phase: before
    tools: [put_note]
    source: {ref: "Notes handbook §3", quote: "Drafts are never marked secret."}
    message: A draft is not marked secret.
    forbid: {where: "args.status = 'draft' AND args.BODY_ARG = 'secret'"}
"""


async def _started(url: str, pack: Path) -> Upstream:
    upstream = Upstream.from_settings(UpstreamConfig(name="notes", transport="http", url=url, policy=pack))
    assert not upstream.policy.typed  # loaded before the tools are known
    return upstream


async def test_the_pack_is_typed_against_the_upstream_tools(upstreams: Any, tmp_path: Path) -> None:
    pack = tmp_path / "policy.yaml"
    pack.write_text(PACK.replace("BODY_ARG", "body"), encoding="utf-8")
    upstream = await _started(upstreams.notes.url, pack)
    async with anyio.create_task_group() as tg:
        await upstream.start(tg)
        assert upstream.policy.typed
        sql = upstream.policy.checks[0].sql  # type: ignore[attr-defined]
        assert "CAST(:status AS TEXT)" in sql and "CAST(:body AS TEXT)" in sql
        assert upstream.visible("put_note") and not upstream.visible("delete_note")
        await upstream.aclose()


async def test_a_rule_naming_a_missing_argument_fails_at_start(upstreams: Any, tmp_path: Path) -> None:
    pack = tmp_path / "policy.yaml"
    pack.write_text(PACK.replace("BODY_ARG", "title"), encoding="utf-8")
    upstream = await _started(upstreams.notes.url, pack)
    async with anyio.create_task_group() as tg:
        with pytest.raises(UpstreamError) as info:
            await upstream.start(tg)
        await upstream.aclose()
    message = str(info.value)
    assert "its policy pack does not fit its tools" in message
    assert f"{pack}: line 13: rule notes.no_secret_drafts: unknown argument args.title" in message
