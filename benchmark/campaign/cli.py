"""``shadowguard bench run``: a lift campaign, written as ThinkingBox-compatible JSONL plus run metadata.

The results file is written by this process only, one whole line at a time (flushed), so Ctrl-C or a
crash leaves a valid file: ``--resume`` keeps its rows, drops system-error rows and a torn last line,
and runs only what is missing, keyed by (uid, trajectory, repetition, arm).
"""

from __future__ import annotations

import fnmatch
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from benchmark.campaign.agents import AGENTS
from benchmark.campaign.arms import ARMS, ArmError, parse_arms
from benchmark.campaign.profiles import FeedbackSpecError, ProfileError, load_profile, parse_feedback
from benchmark.campaign.ray_engine import RayEngineError, run_units_ray
from benchmark.campaign.results import ResultsError, iter_results
from benchmark.campaign.runner import (
    RUBRICS_NOT_JUDGED,
    AttemptSummary,
    CampaignConfig,
    Tally,
    UnitKey,
    Worker,
    digest_file,
    run_units,
    summary_of,
)
from benchmark.campaign.surfaces import REVIEWERS
from benchmark.envs import DOMAINS, EnvError
from guard.faults import FaultPlan, FaultSpecError
from guard.policy import PolicyError

RowKey = tuple[str, str | None, int, str]


class _Rate(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.1f} attempts/s" if speed else "- attempts/s")


def _select(worker_tasks: Sequence[str], spec: str | None) -> list[str]:
    """``--tasks``: a file of uids (one a line, ``#`` comments) or a glob over uids."""
    if spec is None:
        return list(worker_tasks)
    known = set(worker_tasks)
    path = Path(spec)
    if path.is_file():
        chosen: list[str] = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            uid = line.split("#", 1)[0].strip()
            if not uid:
                continue
            if uid not in known:
                raise ResultsError(f"{path}:{number}: no task with the uid {uid!r} (in the chosen domains)")
            chosen.append(uid)
        if not chosen:
            raise ResultsError(f"{path}: no task uids")
        return chosen
    chosen = [uid for uid in worker_tasks if fnmatch.fnmatchcase(uid, spec)]
    if not chosen:
        raise ResultsError(f"--tasks {spec!r}: matches no task (neither a file nor a glob that matches)")
    return chosen


def _row_key(metadata: dict[str, Any], uid: str) -> RowKey | None:
    rep, arm = metadata.get("repetition"), metadata.get("arm")
    if not isinstance(rep, int) or not isinstance(arm, str):
        return None
    trajectory = metadata.get("trajectory")
    return (uid, trajectory if isinstance(trajectory, str) else None, rep, arm)


def _resume(out: Path, config: CampaignConfig, agent: str) -> tuple[list[AttemptSummary], set[RowKey]]:
    """The rows of ``out`` to keep and their keys; rows of another agent or seed are an error."""
    keep: list[AttemptSummary] = []
    keys: set[RowKey] = set()
    lines = out.read_text(encoding="utf-8").split("\n")
    for number, row in iter_results(out, allow_torn_tail=True):
        key = _row_key(row.metadata, row.uid)
        if key is None:
            raise ResultsError(f"{out}:{number}: field metadata: not a `bench run` row (no repetition/arm)")
        for name, want in (("agent", agent), ("seed", config.seed)):
            if row.metadata.get(name) != want:
                raise ResultsError(
                    f"{out}:{number}: field metadata.{name}: {row.metadata.get(name)!r} differs from this "
                    f"run's {want!r}; resume with the same options or write to another file"
                )
        if row.is_system_error or key in keys:
            continue
        keys.add(key)
        keep.append(summary_of(row, lines[number - 1]))
    return keep, keys


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("shadowguard", "mcp", "pydantic", "sqlalchemy", "sqlglot"):
        try:
            out[dist] = importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _run_metadata(
    config: CampaignConfig, worker: Worker, workers: int, started: datetime, duration: float, tally: Tally
) -> dict[str, Any]:
    packs = {}
    for name, pack in worker.packs.items():
        packs[name] = {
            "pack": pack.name,
            "path": str(pack.path) if pack.path is not None else None,
            "version": worker.versions[name],
        }
    data = worker.bench.tasks_root / "tasks.jsonl"
    return {
        "setup_config": {
            "agent": config.agent,
            "agent_label": worker.agent.label,
            "arms": {
                a: {"levers": sorted(ARMS[a].levers), "description": ARMS[a].description} for a in config.arms
            },
            "repeat": config.repeat,
            "domains": list(config.domains) or sorted(DOMAINS),
            "tasks": len(config.task_ids),
            "seed": config.seed,
            "faults": config.faults,
            "reviewer": config.reviewer,
            "trajectories": config.trajectories,
            "simulated": _simulated(worker),
            "llm": _llm(worker, config),
            "policy_dir": config.policy_dir,
            "db": "postgresql" if (config.db or "").startswith("postgresql") else "sqlite (in memory)",
            "workers": workers,
        },
        "judge": f"golden-state hash equality; rubric tasks: {_rubric_judge(worker)}",
        "upper_bound_arms": [a for a in config.arms if ARMS[a].oracle],
        "policy_packs": packs,
        "data": {
            "kind": worker.bench.kind,
            "tasks": digest_file(data) if data.is_file() else None,
        },
        "versions": _versions(),
        "run_start_dt": started.isoformat(),
        "run_duration (sec)": round(duration, 3),
        "attempts_in_file": sum(tally.attempts.values()),
        "peak_rss_mib": _peak_rss(),
    }


def _simulated(worker: Worker) -> dict[str, Any] | None:
    """A simulated agent's parameters (a simulated figure states them:
    docs/architecture.md#rules-that-keep-the-numbers-honest)."""
    from benchmark.campaign.simulated import SimulatedAgent

    agent = worker.agent
    if not isinstance(agent, SimulatedAgent):
        return None
    return agent.profile.parameters() | {"label": "simulated"}


def _llm(worker: Worker, config: CampaignConfig) -> dict[str, Any] | None:
    """A real-LLM agent's endpoints (key variable names only, never a key) and how calls went."""
    from benchmark.llm.agent import LlmAgent

    agent = worker.agent
    if not isinstance(agent, LlmAgent):
        return None
    served = sorted(agent.served_models)
    return agent.config.public() | {"through_proxy": config.through_proxy, "served_models": served}


def _rubric_judge(worker: Worker) -> str:
    from benchmark.llm.agent import LlmAgent

    agent = worker.agent
    if isinstance(agent, LlmAgent) and agent.judge is not None:
        return f"yes/no rubrics judged by model {agent.config.judge.model if agent.config.judge else '?'}"
    if isinstance(agent, LlmAgent):
        return "rubric not graded (no judge endpoint): such rows do not pass"
    return RUBRICS_NOT_JUDGED


def _peak_rss() -> dict[str, float]:
    """Peak resident memory of this process and of its largest worker process (Linux: KiB units)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"main": round(own, 1), "largest_worker": round(children, 1)}


def _engine(
    engine: str,
    address: str | None,
    config: CampaignConfig,
    jobs: Sequence[tuple[UnitKey, tuple[str, ...]]],
    workers: int,
    probe: Worker,
) -> Iterator[list[AttemptSummary]]:
    if engine == "ray":
        return run_units_ray(config, jobs, address=address, cpus=workers)
    return run_units(config, jobs, workers, worker=probe if workers == 1 else None)


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app`` (the ``bench`` group)."""

    @app.command("run")
    def run(
        agent: Annotated[str, typer.Option("--agent", help=f"The agent: {', '.join(AGENTS)}.")],
        out: Annotated[Path, typer.Option("--out", help="Results JSONL (ThinkingBox DecodeResult rows).")],
        arms: Annotated[
            str, typer.Option("--arms", help=f"Comma-separated arms: {', '.join(ARMS)}.")
        ] = "off,guard",
        repeat: Annotated[int, typer.Option("--repeat", min=1, help="Attempts per task and arm.")] = 1,
        domain: Annotated[list[str] | None, typer.Option("--domain", help="Domain(s) (repeatable).")] = None,
        tasks: Annotated[
            str | None, typer.Option("--tasks", help="A glob over task uids, or a file of uids (one a line).")
        ] = None,
        workers: Annotated[
            int,
            typer.Option("--workers", min=1, help="Worker processes (--engine ray: a local cluster's CPUs)."),
        ] = 1,
        engine: Annotated[
            str,
            typer.Option(
                "--engine",
                help="in-process: worker processes on this machine; ray: Ray tasks (docs/deploy.md).",
            ),
        ] = "in-process",
        address: Annotated[
            str | None,
            typer.Option(
                "--address", help="--engine ray: the cluster's head (host:port, or auto); none: a local one."
            ),
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the faults and retries.")] = 0,
        faults: Annotated[
            str | None,
            typer.Option("--faults", help="Upstream faults, e.g. transient=0.2 (docs/errors.md)."),
        ] = None,
        policy_dir: Annotated[
            Path, typer.Option("--policy-dir", help="Packs at DIR/<domain>/policy.yaml (absent: empty pack).")
        ] = Path("policies"),
        reviewer: Annotated[
            str,
            typer.Option(
                "--reviewer",
                help="The campaign's reviewer for held calls: approve-matching (the gate keeps an approved "
                "call only if it changes what was previewed), reject-all, none (left pending).",
            ),
        ] = "approve-matching",
        trajectories: Annotated[
            Path | None,
            typer.Option("--trajectories", help="--agent replay: a results JSONL or {uid, calls} lines."),
        ] = None,
        resume: Annotated[
            bool, typer.Option("--resume", help="Keep OUT's rows and run only the missing and errored ones.")
        ] = False,
        data: Annotated[str | None, typer.Option("--data", help="Benchmark data (see README).")] = None,
        db: Annotated[str | None, typer.Option("--db", help="SQLAlchemy URL for environments.")] = None,
        profile: Annotated[
            str | None,
            typer.Option("--profile", help="--agent simulated: a profile name (or .yaml file), fitted."),
        ] = None,
        feedback: Annotated[
            str | None,
            typer.Option(
                "--feedback",
                help="--agent simulated: feedback probabilities replacing the profile's, e.g. "
                "classified_hint=0.5,policy_violation=0.5 (feedback=P sets the four guard kinds).",
            ),
        ] = None,
        llm_config: Annotated[
            Path | None,
            typer.Option("--llm-config", help="--agent llm: the endpoints of agent, user and judge (YAML)."),
        ] = None,
        through_proxy: Annotated[
            bool,
            typer.Option(
                "--through-proxy",
                help="--agent llm: calls go through a real `shadowguard serve` in front of the environment.",
            ),
        ] = False,
        proxy_era: Annotated[
            str, typer.Option("--proxy-era", help="--through-proxy: the client's era, legacy or 2026-07-28.")
        ] = "2026-07-28",
    ) -> None:
        """Run agents × arms × repeats over the tasks; one ThinkingBox-compatible row per attempt."""
        console = Console(stderr=True)

        def fail(message: str) -> typer.Exit:
            console.print(f"[red]error:[/red] {message}", highlight=False, markup=True)
            return typer.Exit(2)

        if agent not in AGENTS:
            raise fail(f"--agent: unknown agent {agent!r}; known: {', '.join(AGENTS)}")
        if (agent == "replay") != (trajectories is not None):
            raise fail("--trajectories goes with --agent replay, and --agent replay needs it")
        if (agent == "simulated") != (profile is not None):
            raise fail("--profile goes with --agent simulated, and --agent simulated needs it")
        if feedback is not None and agent != "simulated":
            raise fail("--feedback goes with --agent simulated")
        if (agent == "llm") != (llm_config is not None):
            raise fail("--llm-config goes with --agent llm, and --agent llm needs it")
        if through_proxy and agent != "llm":
            raise fail("--through-proxy goes with --agent llm")
        if proxy_era not in ("legacy", "2026-07-28"):
            raise fail(f"--proxy-era: unknown era {proxy_era!r}; known: legacy, 2026-07-28")
        try:
            changes = parse_feedback(feedback) if feedback is not None else ()
            if profile is not None:
                load_profile(profile, fitted=True).with_feedback(**dict(changes))
        except (ProfileError, ValueError) as exc:
            raise fail(f"--{'feedback' if isinstance(exc, FeedbackSpecError) else 'profile'}: {exc}") from exc
        if engine not in ("in-process", "ray"):
            raise fail(f"--engine: unknown engine {engine!r}; known: in-process, ray")
        if address is not None and engine != "ray":
            raise fail("--address goes with --engine ray")
        if reviewer not in REVIEWERS:
            raise fail(f"--reviewer: unknown policy {reviewer!r}; known: {', '.join(REVIEWERS)}")
        unknown = [d for d in domain or [] if d not in DOMAINS]
        if unknown:
            raise fail(
                f"--domain: unknown domain(s) {', '.join(unknown)}; known: {', '.join(sorted(DOMAINS))}"
            )
        try:
            chosen_arms = [a.name for a in parse_arms(arms)]
            if faults is not None:
                FaultPlan.parse(faults, seed=seed)
        except (ArmError, FaultSpecError) as exc:
            raise fail(f"--{'faults' if isinstance(exc, FaultSpecError) else 'arms'}: {exc}") from exc
        if through_proxy:
            from benchmark.llm.proxied import check_proxy_arms

            try:
                check_proxy_arms(ARMS[name] for name in chosen_arms)
            except ValueError as exc:
                raise fail(f"--arms: {exc}") from exc
        if through_proxy and faults is not None:
            raise fail("--through-proxy does not inject --faults (the upstream is a real server)")
        if out.exists() and not resume:
            raise fail(f"{out} exists: pass --resume to continue it, or choose another --out")
        if out.parent and not out.parent.is_dir():
            raise fail(f"{out.parent}: no such directory")
        base = CampaignConfig(
            agent=agent,
            arms=tuple(chosen_arms),
            repeat=repeat,
            domains=tuple(domain or ()),
            seed=seed,
            faults=faults,
            policy_dir=str(policy_dir),
            reviewer=reviewer,
            trajectories=str(trajectories) if trajectories is not None else None,
            data=data,
            db=db,
            profile=profile,
            feedback=changes,
            llm_config=str(llm_config) if llm_config is not None else None,
            through_proxy=through_proxy,
            proxy_era=proxy_era,
        )
        try:
            probe = Worker(base)
            selected = _select([u for u in probe.tasks], tasks)
        except (EnvError, PolicyError, ResultsError, ValueError) as exc:
            raise fail(str(exc)) from exc
        config = CampaignConfig(**{**base.__dict__, "task_ids": tuple(selected)})
        probe.config = config
        kept: list[AttemptSummary] = []
        done: set[RowKey] = set()
        if resume and out.exists():
            try:
                kept, done = _resume(out, config, probe.agent.name)
            except ResultsError as exc:
                probe.close()
                raise fail(str(exc)) from exc
        jobs: list[tuple[UnitKey, tuple[str, ...]]] = []
        for key in probe.units():
            missing = tuple(a for a in chosen_arms if (key.uid, key.case, key.repetition, a) not in done)
            if missing:
                jobs.append((key, missing))
        total = sum(len(a) for _, a in jobs)
        if resume and out.exists():
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text("".join(s.line + "\n" for s in kept), encoding="utf-8")
            os.replace(tmp, out)
        tally = Tally(chosen_arms)
        for summary in kept:
            if summary.arm in chosen_arms:
                tally.add(summary)
        started_at = datetime.now(UTC)
        started = time.perf_counter()
        interrupted = False
        ran = 0
        console.print(
            f"{agent}: {len(selected)} tasks × {repeat} repeats × {len(chosen_arms)} arms: "
            f"{total} attempts to run" + (f" ({len(kept)} kept from {out})" if kept else ""),
            highlight=False,
        )
        with (
            out.open("a", encoding="utf-8") as sink,
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _Rate(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[rate]}"),
                console=console,
                transient=not sys.stderr.isatty(),
            ) as progress,
        ):
            bar = progress.add_task("attempts", total=total, rate="")
            try:
                for rows in _engine(engine, address, config, jobs, workers, probe):
                    for summary in rows:
                        ran += 1
                        sink.write(summary.line + "\n")
                        tally.add(summary)
                    sink.flush()
                    progress.update(bar, advance=len(rows), rate="pass@1 " + tally.brief())
            except KeyboardInterrupt:
                interrupted = True
            except RayEngineError as exc:
                probe.close()
                raise fail(str(exc)) from exc
        duration = time.perf_counter() - started
        meta_path = out.with_name(out.stem + "_run_metadata.yaml")
        meta = _run_metadata(config, probe, workers, started_at, duration, tally)
        meta["interrupted"] = interrupted
        cluster = address or "local, started for the run"
        meta["engine"] = engine if engine != "ray" else f"ray (cluster: {cluster})"
        meta_path.write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True), encoding="utf-8")
        probe.close()
        done_n = ran
        console.print(
            f"{done_n} attempts in {duration:.1f} s ({done_n / duration if duration else 0:.1f} attempts/s); "
            f"peak memory {meta['peak_rss_mib']['main']:.0f} MiB (main), "
            f"{meta['peak_rss_mib']['largest_worker']:.0f} MiB (largest worker); rows: {out}; "
            f"run metadata: {meta_path}",
            highlight=False,
        )
        if interrupted:
            console.print(f"interrupted: {out} is valid; run again with --resume to finish", highlight=False)
        print(tally.last_line())
        raise typer.Exit(130 if interrupted else 0)
