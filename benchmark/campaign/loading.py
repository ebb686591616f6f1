"""What a campaign loads once per process: a domain's policy pack, the agent's system prompts and the
agent itself (oracle, replay, simulated or llm, from :class:`~benchmark.campaign.run_types.CampaignConfig`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from benchmark.campaign.agents import Agent, OracleAgent, ReplayAgent, load_trajectories
from benchmark.campaign.run_types import CampaignConfig
from benchmark.envs import Database, Domain, load_domain
from benchmark.guarded import load_domain_policy
from benchmark.tasks import BenchData
from guard.policy import EMPTY, PolicyPack


def domain_pack(policy_dir: Path, domain: Domain) -> PolicyPack:
    """``<policy_dir>/<domain>/policy.yaml``, validated against the domain; the empty pack if absent."""
    path = policy_dir / domain.name / "policy.yaml"
    if not path.is_file():
        return EMPTY
    return load_domain_policy(path, domain)


@lru_cache(maxsize=16)
def _read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _dataset_root(bench: BenchData) -> Path:
    root = bench.tasks_root / "dataset" if bench.kind == "checkout" else bench.bundle / "data" / "dataset"
    return root


def instructions(bench: BenchData, scenario: str) -> tuple[str, ...]:
    """The system prompts a ThinkingBox agent gets: think.yaml's, then the scenario's policy."""
    root = _dataset_root(bench)
    agent = _read_yaml(root / "agent" / "think.yaml")
    scen = _read_yaml(root / "scenario" / f"{scenario}.yaml")
    out = [str(agent.get("system_instructions") or "")]
    if scen.get("bot_instructions"):
        out.append(str(scen["bot_instructions"]))
    return tuple(p for p in out if p)


def make_agent(
    config: CampaignConfig, bench: BenchData, uids: set[str], database: Database | None = None
) -> Agent:
    if config.agent == "oracle":
        tasks = bench.tasks(config.domains or None)
        return OracleAgent({t.id: t.answer.golden_tool_interactions for t in tasks})
    if config.agent == "replay":
        if config.trajectories is None:
            raise ValueError("--agent replay needs --trajectories FILE")
        return ReplayAgent(load_trajectories(Path(config.trajectories), uids))
    if config.agent == "simulated":
        from benchmark.campaign.profiles import load_profile
        from benchmark.campaign.simulated import SimulatedAgent

        if config.profile is None:
            raise ValueError("--agent simulated needs --profile NAME")
        profile = load_profile(config.profile, fitted=True)
        if config.feedback:
            profile = profile.with_feedback(**dict(config.feedback))
        tasks = bench.tasks(None)
        domains = {name: load_domain(name, bench.bundle) for name in sorted({t.domain for t in tasks})}
        return SimulatedAgent(profile, tasks, domains, database or Database(config.db), config.seed)
    if config.agent == "llm":
        from benchmark.llm.agent import LlmAgent
        from benchmark.llm.config import load_llm_config

        if config.llm_config is None:
            raise ValueError("--agent llm needs --llm-config FILE")
        by_id = {t.id: t for t in bench.tasks(config.domains or None)}
        return LlmAgent(
            load_llm_config(config.llm_config), by_id, _dataset_root(bench) / "agent" / "think.yaml"
        )
    raise ValueError(f"unknown agent {config.agent!r}; known: oracle, replay, simulated, llm")
