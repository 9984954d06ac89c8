"""The ``workload:`` section of a servesim config, as pydantic models.

Every model forbids unknown keys and constrains its numbers, so that a typo or an
impossible value is rejected with the key path pydantic reports (for example
``workload.synthetic.arrival.rate: must be greater than 0``).  The config
package turns :class:`pydantic.ValidationError` into the user-facing message; this module
only states what is valid.

Three kinds of workload exist, told apart by ``kind``:

- ``trace``: replay a Mooncake-format JSONL trace (open loop, timestamps are arrivals);
- ``synthetic``: requests drawn from distributions (open loop, an arrival process);
- ``closed_loop``: a benchmark client that keeps ``concurrency`` requests in flight.

The parameterisation of each distribution is documented on its class and in
``docs/workload.md``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from .request import MAX_TOKENS
from .agentic.load import AgenticLoad


class _Strict(BaseModel):
    """Base of every workload model: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------------------
# Distributions.  Two families share the same shapes: *length* distributions give whole
# token counts (rounded to the nearest integer, clipped to [min, max], min >= 1) and
# *duration* distributions give seconds (clipped to [min, max], min >= 0).  They are
# separate classes only because their clipping defaults differ.
# ---------------------------------------------------------------------------------------


class _Fixed(_Strict):
    """Always ``value``."""

    dist: Literal["fixed"]
    value: float = Field(ge=0)


class _Uniform(_Strict):
    """Uniform on ``[low, high]``; for lengths, uniform on the integers low..high inclusive."""

    dist: Literal["uniform"]
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> "_Uniform":
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class _Normal(_Strict):
    """Normal with ``mean`` and standard deviation ``std`` (then rounded and clipped)."""

    dist: Literal["normal"]
    mean: float = Field(ge=0)
    std: float = Field(ge=0)


class _Lognormal(_Strict):
    """Lognormal: ``exp(N(mu, sigma^2))``, given by ``sigma`` and exactly one of
    ``median`` (= exp(mu)) or ``mean`` (= exp(mu + sigma^2/2)).

    The median form is the natural one (``mu = ln median``); the mean form is offered
    because traces are usually summarised by their mean.
    """

    dist: Literal["lognormal"]
    sigma: float = Field(ge=0)
    median: float | None = Field(default=None, gt=0)
    mean: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_location(self) -> "_Lognormal":
        if (self.median is None) == (self.mean is None):
            raise ValueError("give exactly one of 'median' or 'mean'")
        return self

    @property
    def mu(self) -> float:
        """Mean of the underlying normal, ``ln median``."""
        if self.median is not None:
            return math.log(self.median)
        assert self.mean is not None
        return math.log(self.mean) - self.sigma**2 / 2


class _Exponential(_Strict):
    """Exponential with the given ``mean``."""

    dist: Literal["exponential"]
    mean: float = Field(gt=0)


class _LengthClip(_Strict):
    """Clipping of a token-count distribution: results lie in ``[min, max]``."""

    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                            description=f"None: {MAX_TOKENS:,} tokens, the most any workload length may be")

    @model_validator(mode="after")
    def _clip_ordered(self) -> "_LengthClip":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class _DurationClip(_Strict):
    """Clipping of a duration distribution (seconds): results lie in ``[min, max]``."""

    min: float = Field(default=0.0, ge=0)
    max: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _clip_ordered(self) -> "_DurationClip":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class FixedLength(_Fixed, _LengthClip):
    """Token count: always ``value`` (rounded, clipped)."""


class UniformLength(_Uniform, _LengthClip):
    """Token count: uniform on the integers ``round(low)..round(high)`` inclusive."""


class NormalLength(_Normal, _LengthClip):
    """Token count: ``round(N(mean, std^2))`` clipped to ``[min, max]``."""


class LognormalLength(_Lognormal, _LengthClip):
    """Token count: rounded lognormal, clipped to ``[min, max]``."""


class ExponentialLength(_Exponential, _LengthClip):
    """Token count: rounded exponential, clipped to ``[min, max]``."""


class FixedDuration(_Fixed, _DurationClip):
    """Seconds: always ``value``."""


class UniformDuration(_Uniform, _DurationClip):
    """Seconds: uniform on ``[low, high]``."""


class NormalDuration(_Normal, _DurationClip):
    """Seconds: normal, clipped to ``[min, max]`` (min defaults to 0)."""


class LognormalDuration(_Lognormal, _DurationClip):
    """Seconds: lognormal."""


class ExponentialDuration(_Exponential, _DurationClip):
    """Seconds: exponential."""


LengthDistribution = Annotated[
    Union[FixedLength, UniformLength, NormalLength, LognormalLength, ExponentialLength],
    Field(discriminator="dist"),
]
DurationDistribution = Annotated[
    Union[FixedDuration, UniformDuration, NormalDuration, LognormalDuration, ExponentialDuration],
    Field(discriminator="dist"),
]


# ---------------------------------------------------------------------------------------
# Trace replay
# ---------------------------------------------------------------------------------------


class TraceWorkload(_Strict):
    """Replay a request trace.  Timestamps are arrivals (open loop).

    ``start_ms``/``end_ms`` select the independent rows whose timestamp lies in
    ``[start_ms, end_ms]``; kept arrivals are ``(timestamp - start_ms) / speedup``.
    Later turns of a session are kept exactly when their session's first turn is.
    """

    kind: Literal["trace"]
    path: str = Field(min_length=1)
    #: ``mooncake`` (flat rows and sessions); the agentic formats lower into a graph of
    #: dependent requests (workload/agentic/, docs/workload.md "Agentic traces").
    format: Literal["mooncake", "mooncake-delta", "agentic_mooncake", "weka", "servesim_dag",
                    "applied_compute_agentic", "dag_jsonl", "dynamo"] = "mooncake"
    #: Agentic formats: when plays start and how dependent requests are released.
    agentic: AgenticLoad | None = None
    #: Tokens per ``hash_ids`` block (Mooncake traces use 512).
    block_size: int = Field(default=512, gt=0)
    #: Timestamps and session delays are divided by this (2.0 = twice the traffic rate).
    speedup: float = Field(default=1.0, gt=0)
    start_ms: float | None = Field(default=None, ge=0)
    end_ms: float | None = Field(default=None, ge=0)
    #: Stop after this many requests.
    limit: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _agentic_options(self) -> "TraceWorkload":
        if self.format == "mooncake":
            if self.agentic is not None:
                raise ValueError("agentic applies to the agentic trace formats (format is 'mooncake')")
        elif self.start_ms is not None or self.end_ms is not None or self.limit is not None:
            raise ValueError(f"start_ms, end_ms and limit apply to format 'mooncake' (format is '{self.format}')")
        if self.format == "applied_compute_agentic" and (self.agentic is None or self.agentic.arrival == "trace"):
            raise ValueError("format 'applied_compute_agentic' has no timestamps: set agentic.arrival to "
                             "'lanes', 'poisson' or 'constant'")
        return self

    @model_validator(mode="after")
    def _window_ordered(self) -> "TraceWorkload":
        if self.start_ms is not None and self.end_ms is not None and self.end_ms < self.start_ms:
            raise ValueError(f"end_ms ({self.end_ms}) must be >= start_ms ({self.start_ms})")
        return self


# ---------------------------------------------------------------------------------------
# Synthetic traffic
# ---------------------------------------------------------------------------------------


class ArrivalProcess(_Strict):
    """When first turns arrive.  The first request arrives at t = 0.

    - ``poisson``: exponential inter-arrival times with mean ``1/rate``;
    - ``constant``: exactly ``1/rate`` apart;
    - ``gamma``: gamma inter-arrival times with mean ``1/rate`` and coefficient of
      variation ``burstiness`` (shape ``1/burstiness^2``).  ``burstiness = 1`` is
      Poisson; larger values are burstier, smaller values more regular.  (vLLM's
      ``--burstiness b`` is the gamma *shape*; it corresponds to ``1/sqrt(b)`` here.)
    """

    process: Literal["poisson", "constant", "gamma"] = "poisson"
    #: Requests (first turns) per second.
    rate: float = Field(gt=0)
    burstiness: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _burstiness_only_for_gamma(self) -> "ArrivalProcess":
        if self.process != "gamma" and self.burstiness != 1.0:
            raise ValueError(
                f"burstiness applies only to process 'gamma' (process is '{self.process}')"
            )
        return self


class PrefixSharing(_Strict):
    """Shared prompt prefixes (system prompts, few-shot headers).

    A fraction ``share`` of first turns starts with one of ``num_groups`` prefixes of
    ``length`` tokens, the group drawn uniformly.  The prefix counts inside the drawn
    input length; an input not longer than the prefix is raised to ``length + 1`` tokens.
    """

    num_groups: int = Field(gt=0)
    length: int = Field(gt=0, le=MAX_TOKENS)
    share: float = Field(ge=0, le=1)


class Sessions(_Strict):
    """Multi-turn conversations.

    Each session has ``turns`` turns.  Turn k+1's prompt is turn k's prompt, turn k's
    answer and ``new_input`` new tokens; it arrives ``think_time_s`` seconds after turn k
    finished.
    """

    turns: LengthDistribution
    think_time_s: DurationDistribution
    new_input: LengthDistribution


class SyntheticWorkload(_Strict):
    """Open-loop traffic drawn from distributions.

    ``num_requests`` counts every request, later turns included; the last session is
    cut short when the count is reached.
    """

    kind: Literal["synthetic"]
    num_requests: int = Field(gt=0)
    arrival: ArrivalProcess
    input: LengthDistribution
    output: LengthDistribution
    prefix: PrefixSharing | None = None
    sessions: Sessions | None = None
    block_size: int = Field(default=512, gt=0)


# ---------------------------------------------------------------------------------------
# Closed-loop benchmark clients
# ---------------------------------------------------------------------------------------


class ClosedLoopWorkload(_Strict):
    """A benchmark client keeping ``concurrency`` requests in flight (see recipes.py).

    ``inferencex_random`` draws each length uniformly from the integers
    ``[floor(range_ratio * L), L]``; ``fixed`` uses exactly ``isl``/``osl``, except that
    ``output_spread`` > 0 draws each output length uniformly from the integers
    ``[floor((1 - output_spread) * osl), osl]``.  Exact lengths make a closed loop run in
    lockstep (a wave of requests finishes in one pass and the next wave arrives together);
    a small spread desynchronises it, as some measured runs were, for reasons a fixed-length
    recipe does not record (docs/validation.md).
    ``num_prompts`` defaults to 10 x concurrency; ``warmup`` to 2 x concurrency for
    ``inferencex_random`` and 0 for ``fixed``.

    ``prompt_pool`` = K makes the client send only K distinct prompts: K entries (each with
    its own lengths, drawn by the recipe's rules) are made once, and every request, warm-up
    included, repeats one of them, as AIPerf does by default (100 synthetic entries,
    ``--num-dataset-entries``, reused until the run ends), so with a prefix cache on, most
    prompts of a long run are cache hits.  ``pool_sampling`` picks the entries the way
    AIPerf's ``--dataset-sampling-strategy`` does: ``shuffle`` (its default for synthetic
    data, and this one's when unset: a random order of all K, a new one after each pass, so
    each entry comes once per pass of K requests), ``random`` (uniform with replacement, what
    AIPerf did before the option existed) or ``sequential``.  Unset pool: every request has a
    prompt of its own.
    """

    kind: Literal["closed_loop"]
    recipe: Literal["inferencex_random", "fixed"]
    concurrency: int = Field(gt=0)
    num_prompts: int | None = Field(default=None, gt=0)
    warmup: int | None = Field(default=None, ge=0)
    isl: int = Field(gt=0, le=MAX_TOKENS)
    osl: int = Field(gt=0, le=MAX_TOKENS)
    range_ratio: float = Field(default=0.8, gt=0, le=1)
    output_spread: float = Field(default=0.0, ge=0, lt=1)
    prompt_pool: int | None = Field(default=None, gt=0)
    pool_sampling: Literal["shuffle", "random", "sequential"] | None = None

    @model_validator(mode="after")
    def _spread_only_for_fixed(self) -> "ClosedLoopWorkload":
        if self.output_spread and self.recipe != "fixed":
            raise ValueError("output_spread applies to recipe 'fixed' only "
                             "(inferencex_random spreads lengths with range_ratio)")
        if self.pool_sampling is not None and not self.prompt_pool:
            raise ValueError("pool_sampling applies with prompt_pool only (set prompt_pool: K)")
        return self

    @property
    def resolved_pool_sampling(self) -> str:
        """How pool entries are picked, with AIPerf's default for synthetic data applied."""
        return self.pool_sampling or "shuffle"

    @property
    def resolved_num_prompts(self) -> int:
        """Measured requests, with the recipe's default applied."""
        return self.num_prompts if self.num_prompts is not None else 10 * self.concurrency

    @property
    def resolved_warmup(self) -> int:
        """Warm-up requests, with the recipe's default applied."""
        if self.warmup is not None:
            return self.warmup
        return 2 * self.concurrency if self.recipe == "inferencex_random" else 0


# ---------------------------------------------------------------------------------------
# Synthetic agent plays (workload/agentic/generator.py)
# ---------------------------------------------------------------------------------------


class Subagents(_Strict):
    """Subagents a main-agent turn spawns: with ``probability`` a turn's answer launches
    ``fanout`` subagents at once; each runs ``turns`` turns of its own (its prompt: the shared
    system prompt and a ``task`` of its own, growing by its answers and tool outputs).  A
    ``background`` share of them runs without a join; the others are joined: the main agent's
    next turn waits for all of them, and their last answers join its context."""

    probability: float = Field(ge=0, le=1)
    fanout: LengthDistribution
    turns: LengthDistribution
    task: LengthDistribution
    background: float = Field(default=0.0, ge=0, le=1)


class Compaction(_Strict):
    """Context compaction: once a main-agent prompt would pass ``threshold`` tokens, the next
    turn starts over from the system prompt and a summary of ``summary`` tokens."""

    threshold: int = Field(gt=0, le=MAX_TOKENS)
    summary: int = Field(gt=0, le=MAX_TOKENS)


class AgentWorkload(_Strict):
    """Synthetic agent runs (plays) for when no trace is at hand (docs/workload.md).

    Every play starts with the same ``system_prompt`` tokens (shared across plays: a prefix
    cache can hold them once) and a ``task`` of its own.  The main agent runs ``turns``
    turns; each answer (``output`` tokens) is followed by a tool call lasting
    ``tool_latency_s`` whose result (``tool_output`` tokens) is appended, so turn k+1's
    prompt is turn k's prompt + its answer + the tool output.  ``subagents`` and
    ``compaction`` are optional.  ``agentic`` says how plays start (lanes or a play rate;
    generated plays have no recorded timestamps)."""

    kind: Literal["agentic"]
    plays: int = Field(gt=0)
    block_size: int = Field(default=64, gt=0)
    system_prompt: int = Field(default=0, ge=0, le=MAX_TOKENS)
    task: LengthDistribution
    turns: LengthDistribution
    output: LengthDistribution
    tool_output: LengthDistribution
    tool_latency_s: DurationDistribution
    subagents: Subagents | None = None
    compaction: Compaction | None = None
    agentic: AgenticLoad

    @model_validator(mode="after")
    def _plays_start_by_lanes_or_rate(self) -> "AgentWorkload":
        if self.agentic.arrival == "trace":
            raise ValueError("agentic.arrival: generated plays have no timestamps; use 'lanes', 'poisson' or 'constant'")
        return self


WorkloadConfig = Annotated[
    Union[TraceWorkload, SyntheticWorkload, ClosedLoopWorkload, AgentWorkload],
    Field(discriminator="kind"),
]

_ADAPTER: TypeAdapter[Any] = TypeAdapter(WorkloadConfig)


def parse_workload(data: Mapping[str, Any]) -> TraceWorkload | SyntheticWorkload | ClosedLoopWorkload | AgentWorkload:
    """Validate a plain mapping (e.g. from YAML) into a workload config.

    Raises :class:`pydantic.ValidationError`; the config package formats it.
    """
    return _ADAPTER.validate_python(data)
