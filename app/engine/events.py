"""The one event stream the CLI, the benchmark and the GUI consume.

``Session.generate(request)`` yields these small frozen dataclasses, in this order:
``StatusEvent`` (stages), optionally ``NoticeEvent`` (fallbacks, warnings), then
``TokenEvent`` / ``RoundEvent`` / ``MemoryEvent`` interleaved while decoding, and exactly one
``DoneEvent`` at the end (also after cancellation or an error inside decoding).
No event holds an MLX array: everything is plain Python, safe to pass across threads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from app.kinds import OFF

# Acceptance rules (app/engine/verify.py); reported in timings.acceptance_rule.
RULE_NONE = "none"  # plain decoding
RULE_GREEDY = "greedy"  # temperature 0: argmax match, exact
RULE_SAMPLE_MATCH = "sample-match"  # deterministic proposals at T>0, exact
RULE_REJECTION = "rejection-sampling"  # stochastic proposals, min(1, p/q) + residual, exact


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repetition_context_size: int = 20
    seed: int | None = None
    # temperature > 0: draw each token with noise keyed by (seed, position), the drafters
    # too, so the reply depends on the seed alone, speculation on or off (False: independent
    # draws, model drafters' proposals checked by rejection sampling, a little more accepted)
    shared_draws: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate. Exactly one of ``prompt`` / ``messages`` / ``prompt_tokens``."""

    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None  # chat turns {"role", "content"}
    prompt_tokens: tuple[int, ...] | None = None
    chat: bool = True  # apply the tokenizer's chat template to ``prompt``
    system_prompt: str | None = None
    draft_kind: str = OFF
    draft_width: int | None = None  # proposals per round; None = the kind's default
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    allow_fallback: bool = True  # run plain decoding if speculation cannot run
    ngram_min: int = 2
    ngram_max: int = 3
    adaptive: bool = True  # prompt lookup: pause proposing while it does not pay
    lookup_assist: bool = True  # model drafters: prompt lookup proposes copies of the context
    # trees of candidates (a model drafter's runner-ups, suffix decoding's other
    # continuations): "off" (chains), "on" (where this
    # machine's verify costs say they pay), "flat" (priced as if a verify of up to 64 tokens
    # cost one step, as on a GPU: a measurement)
    trees: str = "off"
    reuse_cache: bool = False  # continue from a kept conversation state (chat turns)
    conversation: str | None = None  # which chat this turn belongs to (for reuse_cache)
    # whose earlier replies drafters that keep them may propose from (one chat, one API key);
    # None: no earlier replies
    reply_scope: str | None = None
    context_policy: str = "refuse"  # "refuse" | "drop-oldest" (chat turns that do not fit)
    memory_interval_s: float = 0.25
    # when the person asked (time.perf_counter()): Send, the request's arrival at the server,
    # the command's start; time to first token counts from it. None: when generate() is called
    submitted_at: float | None = None


@dataclass(frozen=True)
class StatusEvent:
    stage: str  # "prefill" | "warmup" | "decoding"
    message: str = ""  # plain words for the person waiting
    progress: float | None = None  # 0..1 while a measured stage (warm-up) runs, else None


@dataclass(frozen=True)
class PrefillEvent:
    """Progress while the prompt is read: after every chunk."""

    done: int  # prompt tokens read so far (reused ones not counted)
    total: int  # prompt tokens to read
    tokens_per_s: float
    cache_n: int = 0  # prompt tokens reused from a kept conversation
    context: int | None = None  # the model's context length, when known


@dataclass(frozen=True)
class NoticeEvent:
    """Something the user must see: a fallback to plain decoding, a lossy setting..."""

    code: str  # e.g. "fallback", "draft-disabled"
    message: str


@dataclass(frozen=True)
class TokenEvent:
    """One committed output token."""

    index: int  # position in the output, 0-based
    token_id: int
    text: str  # text newly finalized by the streaming detokenizer (may be "")
    from_draft: bool  # a drafted token the target accepted
    round_index: int  # the round that committed it (-1 for plain decoding)


@dataclass(frozen=True)
class RoundRecord:
    index: int
    proposed: int  # draft tokens verified this round
    accepted: int  # of those, accepted
    bonus: bool  # the target's own token appended (mismatch correction or bonus)
    emitted: int  # tokens committed this round (accepted + bonus, after stop trimming)
    width: int  # proposals asked of the drafter
    draft_ms: float
    verify_ms: float
    rollback_ms: float
    t_ms: float  # time since decoding started, at the end of this round
    total_tokens: int  # output tokens so far
    copied: bool = False  # prompt lookup's copy from the context, beside a model drafter
    source: str = ""  # the kind that proposed it, when several take turns (auto)
    # a tree round: its node count (0: a chain); ``proposed`` is then the drafter's chain in
    # it and ``accepted`` how deep the accepted path went
    tree_nodes: int = 0


@dataclass(frozen=True)
class RoundEvent:
    record: RoundRecord


@dataclass(frozen=True)
class MemorySample:
    t_ms: float
    mlx_active_bytes: int
    mlx_cache_bytes: int
    mlx_peak_bytes: int
    rss_bytes: int
    system_used_fraction: float
    swap_used_bytes: int
    pressure: str | None = None  # macOS kernel pressure level: normal | warn | critical
    prompt_cache_bytes: int = 0  # kept conversation states (prompt cache)


@dataclass(frozen=True)
class MemoryEvent:
    sample: MemorySample


@dataclass(frozen=True)
class Timings:
    """Per-request figures; names follow llama-server where they exist, so users can compare."""

    prompt_n: int = 0  # prompt tokens processed by this request
    cache_n: int = 0  # prompt tokens reused from a kept conversation (not processed)
    prompt_ms: float = 0.0
    prompt_per_second: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    predicted_per_second: float = 0.0
    draft_n: int = 0
    draft_n_accepted: int = 0
    draft_rounds: int = 0
    # of draft_n / draft_n_accepted / draft_rounds: prompt lookup's copies beside the drafter
    copy_n: int = 0
    copy_n_accepted: int = 0
    copy_rounds: int = 0
    # of draft_rounds: rounds verified as trees, and how deep their accepted paths went
    tree_rounds: int = 0
    tree_depth_mean: float = 0.0
    draft_kind: str = OFF
    accept_len_mean: float = 0.0  # draft_n_accepted / draft_rounds
    acceptance_rate: float = 0.0  # draft_n_accepted / draft_n
    tokens_per_verify: float = 0.0  # emitted tokens / target verify passes
    verify_passes: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    rollback_ms: float = 0.0
    ttft_ms: float = 0.0  # from the request's submission: every wait before the first token
    warmup_ms: float = 0.0  # of ttft_ms: measuring this machine's speed (only the first time)
    peak_memory_bytes: int = 0
    draft_width: int = 0
    acceptance_rule: str = RULE_NONE
    fallback: str | None = None  # why speculation did not run, if it did not
    exact: bool = True  # False only for a labelled lossy mode
    # auto: per source (a kind's name) {"rounds", "drafted", "accepted", "trees"}, "plain":
    # {"rounds": plain steps}; sources it loaded appear with zero rounds
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    sources_left_out: dict[str, str] = field(default_factory=dict)  # auto: kind -> why
    seed: int | None = None  # what sampling drew with: the same seed gives the same reply

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DoneEvent:
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length" | "cancelled" | "error"
    timings: Timings
    rounds: tuple[RoundRecord, ...] = ()
    error: str | None = None  # plain-language message when finish_reason == "error"

    def to_dict(self) -> dict[str, Any]:
        return done_dict(self)


def done_dict(done: Any) -> dict[str, Any]:
    """The wire form of a finished reply, local (``DoneEvent``) or remote (``RemoteDone``)."""
    return {
        "text": done.text,
        "tokens": list(done.token_ids),
        "finish_reason": done.finish_reason,
        "fallback": done.timings.fallback,
        "timings": done.timings.to_dict(),
        "error": done.error,
    }


Event = StatusEvent | PrefillEvent | NoticeEvent | TokenEvent | RoundEvent | MemoryEvent | DoneEvent
