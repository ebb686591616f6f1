"""``--through-proxy``: the agent's calls take exactly the path a production agent's take.

Each campaign worker starts, per domain and once, the domain's environment as an MCP server over HTTP
(:mod:`benchmark.llm.staged_env`: ``shadowguard env serve`` plus two staging methods) and, per guarded
arm on its first attempt there, a real ``shadowguard serve`` subprocess with that server as its upstream
and the arm's cut of the domain's pack as the upstream's ``policy:`` — a pack file written in the pack's
own format (:mod:`benchmark.llm.armpacks`), loaded as a deployment loads any pack — with an approvals
store and a campaign reviewer in a temporary folder. An attempt then

1. stages the task on the environment server (sessions created from now on start from its data);
2. connects an MCP client in the chosen era (``--proxy-era``) — to the arm's proxy, or straight to
   the environment server for ``off`` — lists the tools the agent may see there, and lets the agent
   run on them: the text the model reads is the proxy's own rendering of the guard's outcome;
3. plays the campaign reviewer for a held call (``--reviewer``) through the approvals API, and calls
   again under the approval, as the in-process surface does;
4. commits through the proxy's ``commit`` tool (the orchestrator's commit), then takes the state hash of
   the attempt's environment session for the judge.

``oracle-ceiling`` does not run this way (it reads the answer key; :func:`check_proxy_arms`). One
difference from the in-process arms remains: the proxy always retries transient and rate-limited
upstream errors (guard.retry's default budgets, which no setting switches off), so an arm without the
``retries`` lever loses only the pack's per-tool retry rules here. A server that does not start, or a
transport failure, makes the attempt a system error.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
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
from benchmark.campaign.arms import Arm
from benchmark.campaign.results import GuardFacts
from benchmark.guarded import load_domain_policy
from benchmark.llm.armpacks import write_arm_pack
from benchmark.llm.staged_env import ANNOUNCE as ENV_ANNOUNCE
from benchmark.llm.staged_env import stage, take
from benchmark.perf_proxy import SERVE_ANNOUNCE
from benchmark.procs import ServerProcess, stop_all
from benchmark.tasks import Task
from guard.policy import PolicyPack

if TYPE_CHECKING:
    from benchmark.campaign.runner import UnitKey, Worker, _Attempt

SESSION_META_KEY = "shadowguard/session"
APPROVAL_META_KEY = "shadowguard/approval"
OUTCOME_META_KEY = "shadowguard/outcome"
STOPS = ("refused", "rolled_back", "held")


def _text(result: types.CallToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))


class _Proxy:
    """``shadowguard serve`` in front of a domain's environment server, with an arm's cut pack."""

    def __init__(self, work: Path, domain: str, arm: Arm, pack: Path, env_url: str, token: str) -> None:
        name = f"{domain}-{arm.name}"
        config = {
            "upstreams": [{"name": "env", "transport": "http", "url": env_url, "policy": str(pack)}],
            "http": {"host": "127.0.0.1", "port": 0},
            "approvals": {"store": f"sqlite:///{work / f'{name}-approvals.db'}", "wait_s": 0},
            "sessions": {"store": f"sqlite:///{work / f'{name}-sessions.db'}"},
            "audit": {"path": str(work / f"{name}-audit.jsonl")},
            "telemetry": {"exporter": "none"},
            "auth": {
                "reviewers": [
                    {
                        "name": "campaign-reviewer",
                        "role": "approver",
                        "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
                    }
                ]
            },
        }
        path = work / f"{name}-proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        executable = str(Path(sys.executable).parent / "shadowguard")
        self.server = ServerProcess(
            [executable, "serve", "--config", str(path)],
            work / f"{name}-proxy.log",
            SERVE_ANNOUNCE,
            name=f"shadowguard serve ({name})",
        )
        self.reviewer_token = token
        self.url = ""
        self.base = ""

    def wait(self) -> None:
        """Returns once the proxy listens (:class:`~benchmark.procs.ServerError` if it does not)."""
        self.url = self.server.wait_url()
        self.base = self.url.rsplit("/mcp", 1)[0]


class _Domain:
    """One domain's servers: the environment, and a ``shadowguard serve`` per guarded arm in front of
    it, each started on the arm's first attempt."""

    def __init__(self, work: Path, domain: str, data: str | None, db: str | None) -> None:
        self.work = work
        self.name = domain
        self.proxies: dict[str, _Proxy] = {}
        args = [sys.executable, "-m", "benchmark.llm.staged_env", "--domain", domain]
        args += ["--data", data] if data else []
        args += ["--db", db] if db else []
        self.env = ServerProcess(args, work / f"{domain}-env.log", ENV_ANNOUNCE, name=f"{domain} environment")
        try:
            self.env_url = self.env.wait_url()
        except BaseException:
            self.env.stop()
            raise

    def proxy(self, arm: Arm, pack: PolicyPack, load: Callable[[Path], PolicyPack], token: str) -> _Proxy:
        """The arm's proxy, started (and waited for) on its first use. One at a time: a proxy's start
        is mostly CPU (imports), so starting several together is no faster, only later each."""
        if arm.name not in self.proxies:
            folder = self.work / "packs" / arm.name / self.name
            write_arm_pack(arm, pack, folder, load)
            proxy = _Proxy(self.work, self.name, arm, folder / "policy.yaml", self.env_url, token)
            try:
                proxy.wait()
            except BaseException:
                proxy.server.stop()
                raise
            self.proxies[arm.name] = proxy
        return self.proxies[arm.name]

    def stop(self) -> None:
        stop_all([*(p.server for p in self.proxies.values()), self.env])


class ProxyStack:
    """A worker's servers, started per domain (and arm) on first use; :meth:`close` stops them all."""

    def __init__(self, data: str | None, db: str | None, era: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="shadowguard-llm-proxy-")
        self.work = Path(self._tmp.name)
        self.data = data
        self.db = db
        self.era = era
        self.reviewer_token = secrets.token_urlsafe(24)
        self.domains: dict[str, _Domain] = {}
        self._exit = ExitStack()
        self.portal: BlockingPortal = self._exit.enter_context(start_blocking_portal())
        self._closed = False
        # A pool's worker process ends without atexit; multiprocessing's finalizers still run there.
        mp_util.Finalize(self, self.close, exitpriority=10)

    def domain(self, name: str) -> _Domain:
        if name not in self.domains:
            self.domains[name] = _Domain(self.work, name, self.data, self.db)
        return self.domains[name]

    def connect(self, url: str) -> AbstractContextManager[Client]:
        client = Client(url, mode=cast(Any, self.era), cache=None, read_timeout_seconds=120)
        return self.portal.wrap_async_context_manager(client)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        stop_all(
            [*(p.server for d in self.domains.values() for p in d.proxies.values())]
            + [d.env for d in self.domains.values()]
        )
        self.domains.clear()
        self._exit.close()
        self._tmp.cleanup()


class ProxiedTools:
    """The agent's tool surface over MCP (the proxy's, or the environment server's for ``off``)."""

    def __init__(
        self, stack: ProxyStack, client: Client, session: str, proxy: _Proxy | None, reviewer: str
    ) -> None:
        self.stack = stack
        self.client = client
        self.meta = {SESSION_META_KEY: session}
        self.proxy = proxy
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
        if self.proxy is None:
            raise RuntimeError(f"a call was held ({approval}) on a path without the proxy")
        decision = "approve" if approve else "reject"
        response = httpx2.post(
            f"{self.proxy.base}/api/approvals/{approval}/{decision}",
            json={"reason": f"campaign reviewer policy {self.reviewer}"},
            headers={"authorization": f"Bearer {self.proxy.reviewer_token}"},
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


def check_proxy_arms(arms: Iterable[Arm]) -> None:
    """A :class:`ValueError` naming the arms that cannot run through the proxy: those that read the
    answer key (``oracle-ceiling``), which no deployed proxy has."""
    oracle = [arm.name for arm in arms if arm.oracle]
    if oracle:
        raise ValueError(
            f"--through-proxy cannot run {', '.join(oracle)}: it reads the answer key (the judge as an "
            "at-commit check), which a deployed proxy never has; run it in process"
        )


def _stack(worker: Worker) -> ProxyStack:
    stack = getattr(worker, "proxy_stack", None)
    if stack is None:
        config = worker.config
        stack = ProxyStack(config.data, config.db, config.proxy_era)
        worker.proxy_stack = stack  # type: ignore[attr-defined]  # closed by Worker.close
    return cast(ProxyStack, stack)


def proxied_attempt(worker: Worker, task: Task, key: UnitKey, arm: Arm, seed: int) -> _Attempt:
    """One attempt of ``worker``'s agent on ``task`` through the proxy (``guard``) or straight to the
    environment server (``off``), judged on the state the attempt left in the environment."""
    from benchmark.campaign.runner import _Attempt, _Judged, instructions

    check_proxy_arms([arm])
    if worker.plan is not None:
        raise ValueError("--through-proxy does not inject --faults (the upstream is a real server)")
    started = time.perf_counter()
    stack = _stack(worker)
    domain = stack.domain(task.domain)
    proxy = None
    if arm.guarded:
        load = partial(load_domain_policy, domain=worker.domains[task.domain])
        proxy = domain.proxy(arm, worker.packs[task.domain], load, stack.reviewer_token)
    session = f"campaign-{task.id}-{key.repetition}-{arm.name}-{secrets.token_hex(4)}"
    url = proxy.url if proxy is not None else domain.env_url
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
            tools = ProxiedTools(stack, client, session, proxy, worker.config.reviewer)
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
