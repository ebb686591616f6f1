"""``--through-proxy``: the agent's calls take exactly the path a production agent's take.

Each campaign worker starts, per domain and once, the domain's environment as an MCP server over HTTP
(:mod:`benchmark.llm.staged_env`: ``shadowguard env serve`` plus two staging methods) and a real
``shadowguard serve`` subprocess with that server as its upstream and the domain's policy pack
(``<policy_dir>/<domain>/policy.yaml``), an approvals store and a campaign reviewer in a temporary
folder. An attempt then

1. stages the task on the environment server (sessions created from now on start from its data);
2. connects an MCP client in the chosen era (``--proxy-era``) — to the proxy for ``guard``, straight to
   the environment server for ``off`` — lists the tools the agent may see there, and lets the agent run
   on them: the text the model reads is the proxy's own rendering of the guard's outcome;
3. plays the campaign reviewer for a held call (``--reviewer``) through the approvals API, and calls
   again under the approval, as the in-process surface does;
4. commits through the proxy's ``commit`` tool (the orchestrator's commit), then takes the state hash of
   the attempt's environment session for the judge.

The proxy runs a whole pack, so only the arms ``off`` and ``guard`` run through it (the lever arms
and ``oracle-ceiling`` are in-process only). A server that does not start, or a transport failure,
makes the attempt a system error.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from multiprocessing import util as mp_util
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import httpx2
import mcp.types as types
import yaml
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client

from benchmark.campaign.agents import AgentView, ToolReply, ToolSpec
from benchmark.campaign.results import GuardFacts
from benchmark.llm.staged_env import ANNOUNCE as ENV_ANNOUNCE
from benchmark.llm.staged_env import stage, take
from benchmark.perf_proxy import SERVE_ANNOUNCE, _Server
from benchmark.tasks import Task

if TYPE_CHECKING:
    from benchmark.campaign.arms import Arm
    from benchmark.campaign.runner import UnitKey, Worker, _Attempt

PROXY_ARMS = ("off", "guard")
SESSION_META_KEY = "shadowguard/session"
APPROVAL_META_KEY = "shadowguard/approval"
OUTCOME_META_KEY = "shadowguard/outcome"
STOPS = ("refused", "rolled_back", "held")


def _text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


class _Domain:
    """One domain's servers: the environment, and ``shadowguard serve`` in front of it."""

    def __init__(
        self, work: Path, domain: str, policy: Path | None, data: str | None, db: str | None
    ) -> None:
        self.servers: list[_Server] = []
        try:
            self._start(work, domain, policy, data, db)
        except BaseException:
            self.stop()  # a server that did not start: stop what did, and let the attempt fail
            raise

    def _start(self, work: Path, domain: str, policy: Path | None, data: str | None, db: str | None) -> None:
        args = [sys.executable, "-m", "benchmark.llm.staged_env", "--domain", domain]
        args += ["--data", data] if data else []
        args += ["--db", db] if db else []
        env = _Server(args, work / f"{domain}-env.log", ENV_ANNOUNCE, name=f"{domain} environment")
        self.servers.append(env)
        self.env_url = env.wait_url()
        self.reviewer_token = secrets.token_urlsafe(24)
        upstream: dict[str, Any] = {"name": "env", "transport": "http", "url": self.env_url}
        if policy is not None:
            upstream["policy"] = str(policy.resolve())
        config = {
            "upstreams": [upstream],
            "http": {"host": "127.0.0.1", "port": 0},
            "approvals": {"store": f"sqlite:///{work / f'{domain}-approvals.db'}", "wait_s": 0},
            "audit": {"path": str(work / f"{domain}-audit.jsonl")},
            "telemetry": {"exporter": "none"},
            "auth": {
                "reviewers": [
                    {
                        "name": "campaign-reviewer",
                        "role": "approver",
                        "token_sha256": hashlib.sha256(self.reviewer_token.encode()).hexdigest(),
                    }
                ]
            },
        }
        path = work / f"{domain}-proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        executable = str(Path(sys.executable).parent / "shadowguard")
        proxy = _Server(
            [executable, "serve", "--config", str(path)], work / f"{domain}-proxy.log", SERVE_ANNOUNCE
        )
        self.servers.append(proxy)
        self.proxy_url = proxy.wait_url()
        self.base = self.proxy_url.rsplit("/mcp", 1)[0]

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()


class ProxyStack:
    """A worker's servers, started per domain on first use; :meth:`close` stops them all."""

    def __init__(self, policy_dir: Path, data: str | None, db: str | None, era: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="shadowguard-llm-proxy-")
        self.work = Path(self._tmp.name)
        self.policy_dir = policy_dir
        self.data = data
        self.db = db
        self.era = era
        self.domains: dict[str, _Domain] = {}
        self._exit = ExitStack()
        self.portal: BlockingPortal = self._exit.enter_context(start_blocking_portal())
        self._closed = False
        # A pool's worker process ends without atexit; multiprocessing's finalizers still run there.
        mp_util.Finalize(self, self.close, exitpriority=10)

    def domain(self, name: str) -> _Domain:
        if name not in self.domains:
            policy = self.policy_dir / name / "policy.yaml"
            self.domains[name] = _Domain(
                self.work, name, policy if policy.is_file() else None, self.data, self.db
            )
        return self.domains[name]

    def connect(self, url: str) -> AbstractContextManager[Client]:
        client = Client(url, mode=cast(Any, self.era), cache=None, read_timeout_seconds=120)
        return self.portal.wrap_async_context_manager(client)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for domain in self.domains.values():
            domain.stop()
        self.domains.clear()
        self._exit.close()
        self._tmp.cleanup()


class ProxiedTools:
    """The agent's tool surface over MCP (the proxy's, or the environment server's for ``off``)."""

    def __init__(
        self, stack: ProxyStack, client: Client, session: str, domain: _Domain, reviewer: str
    ) -> None:
        self.stack = stack
        self.client = client
        self.meta = {SESSION_META_KEY: session}
        self.domain = domain
        self.reviewer = reviewer
        self.final: list[dict[str, Any]] = []
        """The guard's verdict JSON per call (the approved re-run's, if any); empty dicts for ``off``."""
        self.decisions: Counter[str] = Counter()
        self.requested: set[str] = set()

    def _call(self, name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]) -> types.CallToolResult:
        sent = cast(types.RequestParamsMeta, dict(meta))
        return self.stack.portal.call(partial(self.client.call_tool, name, dict(arguments), meta=sent))

    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolReply:
        result = self._call(name, arguments, self.meta)
        verdict = self._verdict(result)
        approval = verdict.get("approval_id")
        if verdict.get("verdict") == "held" and isinstance(approval, str):
            self.requested.add(approval)
            if self.reviewer != "none":
                self._decide(approval, approve=self.reviewer == "approve-matching")
                result = self._call(name, arguments, self.meta | {APPROVAL_META_KEY: approval})
                verdict = self._verdict(result)
        self.final.append(verdict)
        guard = verdict.get("verdict")
        return ToolReply(
            _text(result), is_error=bool(result.is_error), guard=guard if isinstance(guard, str) else None
        )

    @staticmethod
    def _verdict(result: types.CallToolResult) -> dict[str, Any]:
        stamp = dict((result.meta or {}).get(OUTCOME_META_KEY) or {})
        return stamp | dict(result.structured_content or {}) if stamp else {}

    def _decide(self, approval: str, *, approve: bool) -> None:
        decision = "approve" if approve else "reject"
        response = httpx2.post(
            f"{self.domain.base}/api/approvals/{approval}/{decision}",
            json={"reason": f"campaign reviewer policy {self.reviewer}"},
            headers={"authorization": f"Bearer {self.domain.reviewer_token}"},
            timeout=30,
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"the campaign reviewer could not {decision} {approval}: {response.text[:300]}"
            )
        self.decisions["approved" if approve else "rejected"] += 1

    def commit(self) -> dict[str, Any]:
        result = self._call("commit", {}, self.meta)
        return dict(result.structured_content or {}) | {"text": _text(result)}


def _facts(tools: ProxiedTools, commit: dict[str, Any] | None) -> GuardFacts:
    facts = GuardFacts()
    verdicts = Counter(str(v.get("verdict")) for v in tools.final if v.get("verdict"))
    facts.verdicts = dict(sorted(verdicts.items()))
    facts.violations = [
        {"rule_id": x.get("rule_id"), "tool": v.get("tool"), "phase": "call"}
        for v in tools.final
        for x in v.get("violations") or []
    ]
    facts.retries = sum(int(v.get("retries") or 0) for v in tools.final)
    facts.failed_calls = verdicts.get("failed", 0)
    facts.approvals = {
        "requested": len(tools.requested),
        "approved": tools.decisions["approved"],
        "rejected": tools.decisions["rejected"],
    }
    if commit is not None:
        facts.committed = bool(commit.get("committed"))
        facts.committed_changes = int(commit.get("changes") or 0) if facts.committed else 0
        facts.commit_refused = not facts.committed
        facts.violations += [
            {"rule_id": x.get("rule_id"), "tool": None, "phase": "at_commit"}
            for x in commit.get("violations") or []
        ]
    stops = [v for v in tools.final if v.get("verdict") in STOPS]
    facts.intervened = bool(stops) or facts.commit_refused
    if stops:
        first = stops[0]
        rules = [x.get("rule_id") for x in first.get("violations") or []]
        facts.first_intervention = (
            f"{first.get('tool')}: {first.get('verdict')} ({rules[0] if rules else first.get('error_class')})"
        )
    elif facts.commit_refused:
        rules = [x.get("rule_id") for x in (commit or {}).get("violations") or []]
        facts.first_intervention = f"commit: refused ({rules[0] if rules else 'unknown'})"
    return facts


def _stack(worker: Worker) -> ProxyStack:
    stack = getattr(worker, "proxy_stack", None)
    if stack is None:
        config = worker.config
        stack = ProxyStack(Path(config.policy_dir), config.data, config.db, config.proxy_era)
        worker.proxy_stack = stack  # type: ignore[attr-defined]  # closed by Worker.close
    return cast(ProxyStack, stack)


def proxied_attempt(worker: Worker, task: Task, key: UnitKey, arm: Arm, seed: int) -> _Attempt:
    """One attempt of ``worker``'s agent on ``task`` through the proxy (``guard``) or straight to the
    environment server (``off``), judged on the state the attempt left in the environment."""
    from benchmark.campaign.runner import _Attempt, _Judged, instructions

    if arm.name not in PROXY_ARMS:
        raise ValueError(f"--through-proxy runs the arms {', '.join(PROXY_ARMS)}, not {arm.name}")
    if worker.plan is not None:
        raise ValueError("--through-proxy does not inject --faults (the upstream is a real server)")
    started = time.perf_counter()
    stack = _stack(worker)
    domain = stack.domain(task.domain)
    session = f"campaign-{task.id}-{key.repetition}-{arm.name}-{secrets.token_hex(4)}"
    url = domain.proxy_url if arm.guarded else domain.env_url
    with stack.connect(domain.env_url) as harness:
        stack.portal.call(stage, harness.session, task.id)
        with stack.connect(url) as client:
            listed = stack.portal.call(client.list_tools)
            specs = [ToolSpec(t.name, t.description or "", t.input_schema) for t in listed.tools]
            view = AgentView(
                uid=task.id,
                query=task.query,
                tools=specs,
                instructions=instructions(worker.bench, task.scenario),
                user=_no_user(),
                seed=seed,
                case=key.case,
            )
            tools = ProxiedTools(stack, client, session, domain, worker.config.reviewer)
            transcript = worker.agent.run(view, tools)
            commit = tools.commit() if arm.guarded and transcript.commit else None
        taken = stack.portal.call(take, harness.session)
    expected = task.answer.expected
    if expected is None:
        raise ValueError(f"{task.id}: the task has no expected hashes; it cannot be judged")
    judged = _Judged(taken.state_hash == expected.golden_db_hash, taken.state_hash, expected.golden_db_hash)
    worker._grade_rubrics(task, transcript, judged)
    facts = _facts(tools, commit) if arm.guarded else None
    if transcript.notes is not None:
        transcript.notes["through_proxy"] = {
            "era": stack.era,
            "path": "shadowguard serve" if arm.guarded else "direct",
        }
    return _Attempt(arm, transcript, judged, facts, 0, None, time.perf_counter() - started)


def _no_user() -> Any:
    from benchmark.campaign.agents import NoUser

    return NoUser()
