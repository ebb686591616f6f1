"""Simulated agent profiles: the data a simulated agent is built from
(docs/architecture.md#three-ways-to-measure).

A profile is a YAML file, validated here, in four parts:

``published``
    The figures the profile is fitted to, as the ThinkingBox announcement prints them: pass@1 per
    domain (percent), the overall pass@1, pass@20 (percent, or null where unpublished), the number of
    tasks observed passing 20/20, and the campaign's cost for 507 attempts (USD).
``failure_mix``
    How a failed attempt fails: the published failure-signature shares, the published shares among
    failures that ended cleanly (wrong values, extra effects, missing effects: overlapping), the share
    of tool-usage failures that are upstream environment faults (an assumption: not published) and
    the kinds of those faults.
``feedback``
    How the agent reacts to each kind of feedback: the probability that it corrects course after a
    raw tool error, a classified hint, a policy violation, a refused commit, a call held for approval.
    These are assumptions, never fitted, and every simulated figure states them.
``fit``
    Written by ``shadowguard bench calibrate``: per domain, the propensity distribution (a mixture
    ``w0·δ0 + w1·δ1 + (1 − w0 − w1)·Beta(alpha, beta)``), and the figures the fit reproduces.

Bad input — an unknown profile, a file that is not YAML, a missing or unknown field, a probability
outside [0, 1] — is a :class:`ProfileError` naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from benchmark.envs import DOMAINS

PROFILE_DIR = Path(__file__).parent / "profiles"

DOMAIN_ORDER = (
    "sandbox_external_retail",
    "sandbox_auto_insurance",
    "external_booking_v1",
    "sandbox_neobank_support_v1",
    "sandbox_consulting",
)
"""The published tables' domain order: retail, auto insurance, travel, neobank, consulting."""

SIGNATURES = ("tool_usage", "wrong_state_update", "incomplete_resolution", "no_state_change")
FEEDBACK_KINDS = ("raw_error", "classified_hint", "policy_violation", "commit_refused", "held")
ENV_KINDS = ("503", "429", "refused")
"""Upstream faults raised before the upstream runs the call (guard.faults): the call has no effect."""

Probability = float


class ProfileError(ValueError):
    """A profile that cannot be used: unknown name, unreadable file, invalid field, infeasible fit."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Published(_Strict):
    pass1: dict[str, float]
    """Percent per domain (the five domains, each in [0, 100])."""
    overall_pass1: float = Field(ge=0, le=100)
    pass20: float | None = Field(default=None, ge=0, le=100)
    observed_20: int = Field(ge=0)
    """Tasks passing 20/20 (of all tasks)."""
    campaign_cost_usd: float = Field(ge=0)
    """Cost of one campaign of 507 attempts (one per task)."""

    @model_validator(mode="after")
    def _domains(self) -> Published:
        missing = [d for d in DOMAIN_ORDER if d not in self.pass1]
        unknown = [d for d in self.pass1 if d not in DOMAINS]
        if missing or unknown:
            raise ValueError(
                f"pass1 must name each of {', '.join(DOMAIN_ORDER)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(unknown)}" if unknown else "")
            )
        bad = [d for d, v in self.pass1.items() if not 0 <= v <= 100]
        if bad:
            raise ValueError(f"pass1 of {', '.join(bad)} outside [0, 100]")
        return self


class CleanShares(_Strict):
    """Among failures that ended cleanly; overlapping shares (they need not sum to 1)."""

    wrong_values: Probability = Field(ge=0, le=1)
    extra_effects: Probability = Field(ge=0, le=1)
    missing_effects: Probability = Field(ge=0, le=1)


class FailureMix(_Strict):
    signatures: dict[str, Probability]
    clean: CleanShares
    environment_share: Probability = Field(ge=0, le=1)
    """Share of tool-usage failures that are upstream environment faults (an assumption)."""
    environment_kinds: dict[str, Probability]

    @model_validator(mode="after")
    def _shares(self) -> FailureMix:
        for name, table, known in (
            ("signatures", self.signatures, SIGNATURES),
            ("environment_kinds", self.environment_kinds, ENV_KINDS),
        ):
            unknown = [k for k in table if k not in known]
            if unknown:
                raise ValueError(f"{name}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
            bad = [k for k, v in table.items() if not 0 <= v <= 1]
            if bad:
                raise ValueError(f"{name}: {', '.join(bad)} outside [0, 1]")
            if abs(sum(table.values()) - 1) > 0.005:
                raise ValueError(f"{name}: shares sum to {sum(table.values()):.4f}, not 1")
        return self


class Feedback(_Strict):
    """Probability that the agent corrects course after each kind of feedback."""

    raw_error: Probability = Field(ge=0, le=1)
    classified_hint: Probability = Field(ge=0, le=1)
    policy_violation: Probability = Field(ge=0, le=1)
    commit_refused: Probability = Field(ge=0, le=1)
    held: Probability = Field(ge=0, le=1)

    def of(self, kind: str) -> float:
        value: float = getattr(self, kind)
        return value

    def describe(self) -> str:
        return " ".join(f"{k}={self.of(k):g}" for k in FEEDBACK_KINDS)


class Mixture(_Strict):
    """``w0·δ0 + w1·δ1 + (1 − w0 − w1)·Beta(alpha, beta)``: a task's success propensity."""

    w0: Probability = Field(ge=0, le=1)
    w1: Probability = Field(ge=0, le=1)
    alpha: float = Field(gt=0)
    beta: float = Field(gt=0)

    @model_validator(mode="after")
    def _weights(self) -> Mixture:
        if self.w0 + self.w1 > 1:
            raise ValueError(f"w0 + w1 = {self.w0 + self.w1:.6f} exceeds 1")
        return self


class Fit(_Strict):
    method: Literal["beta", "beta+mass0", "beta+mass1"]
    kappa: float = Field(gt=0)
    """The Beta part's concentration (alpha + beta), shared by the domains."""
    lambda0: Probability = Field(ge=0, le=1)
    """Point mass at 0 as a share of each domain's failure rate."""
    lambda1: Probability = Field(ge=0, le=1)
    """Point mass at 1 as a share of each domain's pass@1."""
    domains: dict[str, Mixture]
    expected: dict[str, Any]
    """The figures the fitted distributions give in expectation (percent; 20/20 in tasks)."""


class Profile(_Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9.-]*$")
    model: str = Field(min_length=1)
    source: str = Field(min_length=1)
    published: Published
    failure_mix: FailureMix
    feedback: Feedback
    fit: Fit | None = None

    @property
    def agent_name(self) -> str:
        return f"simulated:{self.name}"

    def with_feedback(self, **changes: float) -> Profile:
        """A copy with some feedback probabilities replaced (validated)."""
        feedback = Feedback.model_validate(self.feedback.model_dump() | changes)
        return self.model_copy(update={"feedback": feedback})

    def parameters(self) -> dict[str, Any]:
        """What every simulated figure states: the profile, its fit and its assumptions."""
        return {
            "profile": self.name,
            "model": self.model,
            "feedback": self.feedback.model_dump(),
            "environment_share": self.failure_mix.environment_share,
            "fit": self.fit.method if self.fit is not None else None,
        }


class FeedbackSpecError(ProfileError):
    """A ``--feedback``/``--sweep`` value that cannot be read."""


GUARD_FEEDBACK = ("classified_hint", "policy_violation", "commit_refused", "held")
"""The feedback only a guard gives; ``feedback=P`` sets all four (raw errors stay as calibrated)."""


def parse_feedback(spec: str) -> tuple[tuple[str, float], ...]:
    """``held=0.5,classified_hint=1`` (or ``feedback=0.5`` for the four guard kinds) -> pairs."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise FeedbackSpecError(f"{part!r}: expected KIND=P, e.g. held=0.5")
        try:
            number = float(value)
        except ValueError:
            raise FeedbackSpecError(f"{name}: {value!r} is not a number") from None
        if not 0 <= number <= 1:
            raise FeedbackSpecError(f"{name}: {number:g} is outside [0, 1]")
        if name == "feedback":
            out.update(dict.fromkeys(GUARD_FEEDBACK, number))
        elif name in FEEDBACK_KINDS:
            out[name] = number
        else:
            raise FeedbackSpecError(
                f"unknown feedback kind {name!r}; known: feedback, {', '.join(FEEDBACK_KINDS)}"
            )
    if not out:
        raise FeedbackSpecError("empty feedback spec; e.g. feedback=0.5")
    return tuple(out.items())


def profile_path(name: str) -> Path:
    """``NAME`` → the profile file: a path to a ``.yaml`` file, or a name of ``PROFILE_DIR``."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml"):
        if not candidate.is_file():
            raise ProfileError(f"{candidate}: no such profile file")
        return candidate
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise ProfileError(f"unknown profile {name!r}; known: {known} (or a path to a .yaml file)")
    return path


def _field_error(path: Path, exc: ValidationError) -> ProfileError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return ProfileError(f"{path}: field {where}: {first['msg']}")


def load_profile(name: str, *, fitted: bool = False) -> Profile:
    """The profile ``name`` (see :func:`profile_path`), validated; ``fitted`` requires its ``fit``."""
    path = profile_path(name)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileError(f"{path}: cannot read: {exc}") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: not a YAML mapping")
    try:
        profile = Profile.model_validate(raw)
    except ValidationError as exc:
        raise _field_error(path, exc) from None
    if fitted and profile.fit is None:
        raise ProfileError(f"{path}: field fit: missing; run `shadowguard bench calibrate --profile {name}`")
    return profile


def save_profile(profile: Profile, path: Path) -> None:
    """Write ``profile`` to ``path`` (keys in model order), replacing the file whole."""
    text = yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=110)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
