"""The pairing check: will this target + draft (or drafter kind) work, and why not.

Public API:
    check(target, draft=None, kind=None, context=None, *, width=None, budget=None) -> PairingReport
        target/draft: a folder path or a CheckpointInfo. kind: none | full-model | prompt-lookup
        | mtp | dflash (None: inferred from the draft). Reads config, tokenizer files and
        safetensors headers only; never raises for bad checkpoints (problems are findings).
    suggest_drafts(target, *, store=None, context=None, budget=None, entries=None) -> Suggestions
        ranks local checkpoints (the store, or ``entries`` with .name/.path) that pair with the
        target; one sentence per exclusion; .no_model_options = prompt lookup / MTP reports.
    PairingReport: verdict (VERDICT_*), findings (Finding: code, severity, message, detail),
                   memory (MemoryEstimate), to_dict(), format_text().
    KINDS, normalize_kind(name)
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.checkpoints.inspect import (
    KIND_DFLASH,
    KIND_UNSUPPORTED,
    MTP_FAMILIES,
    CheckpointInfo,
    inspect_checkpoint,
)
from app.checkpoints.memory import (
    Budget,
    MemoryEstimate,
    estimate_memory,
    format_bytes,
    memory_budget,
)

if TYPE_CHECKING:
    from app.checkpoints.store import Store, StoreEntry

BLOCKER, WARNING, NOTE = "blocker", "warning", "note"
VERDICT_WORKS = "works"
VERDICT_WARNINGS = "works-with-warnings"
VERDICT_FAILS = "will-not-work"
VERDICT_LABELS = {
    VERDICT_WORKS: "Works",
    VERDICT_WARNINGS: "Works, with warnings",
    VERDICT_FAILS: "Will not work",
}
KINDS = ("none", "full-model", "prompt-lookup", "mtp", "dflash")
_ALIASES = {
    "full_model": "full-model", "draft": "full-model", "model": "full-model",
    "prompt_lookup": "prompt-lookup", "ngram": "prompt-lookup", "lookup": "prompt-lookup",
    "off": "none",
}  # fmt: skip
_RUNTIME_MODULES = {"mtp": "app.engine.drafters.mtp", "dflash": "app.engine.drafters.dflash"}
DEFAULT_CONTEXT = 4096


def normalize_kind(kind: str | None) -> str | None:
    if kind is None:
        return None
    k = kind.strip().lower()
    k = _ALIASES.get(k, k)
    if k not in KINDS:
        raise ValueError(f"unknown draft kind {kind!r} (choose from {', '.join(KINDS)})")
    return k


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # blocker | warning | note
    message: str  # one plain sentence for a non-programmer
    detail: str = ""  # the technical facts

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class PairingReport:
    target: str
    draft: str | None
    kind: str
    context: int
    verdict: str
    findings: tuple[Finding, ...]
    memory: MemoryEstimate | None = None
    elapsed_ms: float = 0.0

    @property
    def works(self) -> bool:
        return self.verdict != VERDICT_FAILS

    def by_severity(self, severity: str) -> list[Finding]:
        return [f for f in self.findings if f.severity == severity]

    @property
    def blockers(self) -> list[Finding]:
        return self.by_severity(BLOCKER)

    @property
    def warnings(self) -> list[Finding]:
        return self.by_severity(WARNING)

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def summary(self) -> str:
        """One plain sentence: the verdict and its main reason."""
        label = VERDICT_LABELS[self.verdict]
        first = (self.blockers or self.warnings or [None])[0]
        return f"{label}: {first.message}" if first else f"{label}."

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "draft": self.draft,
            "kind": self.kind,
            "context": self.context,
            "verdict": self.verdict,
            "findings": [f.to_dict() for f in self.findings],
            "memory": self.memory.to_dict() if self.memory else None,
            "elapsed_ms": round(self.elapsed_ms, 1),
        }

    def format_text(self, *, details: bool = True) -> str:
        lines = [f"Target: {self.target}"]
        if self.draft:
            lines.append(f"Draft:  {self.draft}")
        lines.append(f"Kind:   {self.kind}   context {self.context} tokens")
        lines.append(f"Verdict: {VERDICT_LABELS[self.verdict]}")
        marks = {BLOCKER: "x", WARNING: "!", NOTE: "-"}
        for sev in (BLOCKER, WARNING, NOTE):
            for f in self.by_severity(sev):
                lines.append(f"  [{marks[sev]}] {sev}: {f.message}")
                if details and f.detail and not f.code.startswith("memory."):
                    lines.append(f"        {f.code}: {f.detail}")
        if self.memory:
            lines.append("Memory: " + "; ".join(self.memory.lines()))
        return "\n".join(lines)


class _Findings:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, code: str, severity: str, message: str, detail: str = "") -> None:
        self.items.append(Finding(code, severity, message, detail))

    def has_blocker(self, prefix: str = "") -> bool:
        return any(f.severity == BLOCKER and f.code.startswith(prefix) for f in self.items)


def _as_info(x: str | Path | CheckpointInfo) -> CheckpointInfo:
    if isinstance(x, CheckpointInfo):
        # store listings skip tokenizer files; every pairing judgement needs them
        if x.tokenizer is None and x.path.is_dir():
            return inspect_checkpoint(x.path)
        return x
    return inspect_checkpoint(Path(x))


def _role_name(role: str) -> str:
    return "target" if role == "target" else "draft"


def _model_findings(info: CheckpointInfo, role: str, out: _Findings) -> bool:
    """Checks on one checkpoint alone. Returns False when nothing else can be judged."""
    who = _role_name(role)
    p = info.path
    if not p.exists():
        out.add(f"{role}.missing", BLOCKER, f"The {who} folder does not exist.", str(p))
        return False
    if not p.is_dir():
        out.add(f"{role}.not_folder", BLOCKER, f"The {who} is a file, not a model folder.", str(p))
        return False
    if info.config is None:
        out.add(
            f"{role}.config_invalid",
            BLOCKER,
            f"The {who}'s settings file is missing or damaged, so it cannot be used.",
            f"{p / 'config.json'}: {info.config_error}",
        )
        return False
    w = info.weights
    if w is None or not w.files:
        if w and w.pickle_files:
            out.add(
                f"{role}.pickle_only",
                BLOCKER,
                f"The {who}'s weights are in an unsafe format (pickle) that DraftPair never opens; "
                "convert it to safetensors first.",
                "found " + ", ".join(x.name for x in w.pickle_files) + "; no *.safetensors",
            )
        else:
            out.add(
                f"{role}.no_weights",
                BLOCKER,
                f"The {who} folder has no weight files.",
                f"no *.safetensors in {p}",
            )
        return False
    if w.errors:
        out.add(
            f"{role}.weights_corrupt",
            BLOCKER,
            f"The {who}'s weight files are damaged or incomplete (maybe an interrupted download).",
            " ".join(w.errors),
        )
    if w.pickle_files:
        out.add(
            f"{role}.pickle_ignored",
            NOTE,
            f"The {who} folder also has pickle files; DraftPair ignores them.",
            ", ".join(x.name for x in w.pickle_files),
        )
    if info.config.get("model_file"):
        out.add(
            f"{role}.remote_code",
            BLOCKER,
            f"The {who} needs its own Python code to run, which DraftPair never runs.",
            f"config.json model_file={info.config.get('model_file')!r}",
        )
    elif info.remote_code:
        out.add(
            f"{role}.remote_code_ignored",
            NOTE,
            f"The {who}'s custom code is never run.",
            "config.json auto_map present",
        )
    if info.kind == KIND_DFLASH:
        return True  # DFlash drafters are judged by the dflash checks
    if not info.arch_supported:
        out.add(
            f"{role}.arch_unsupported",
            BLOCKER,
            f"The installed MLX runtime cannot run this kind of model ({info.model_type or 'unknown type'}).",
            info.arch_detail,
        )
    if info.quantization_problem:
        out.add(
            f"{role}.quant_unreadable",
            BLOCKER,
            f"The {who}'s compressed weights cannot be read: {info.quantization_problem}.",
            str(info.quantization),
        )
    if info.kind == KIND_UNSUPPORTED and info.unsupported_reason and not out.has_blocker(role):
        out.add(f"{role}.unsupported", BLOCKER, info.unsupported_reason, f"{p}")
    if info.vocab_size is None:
        if info.embedding_rows:
            out.add(
                f"vocab.{role}_undeclared",
                WARNING,
                f"The {who}'s settings do not state its vocabulary size; DraftPair used the size of its weights.",
                f"config.json has no vocab_size; embedding rows = {info.embedding_rows}",
            )
        else:
            out.add(
                f"vocab.{role}_undeclared",
                WARNING,
                f"The {who}'s settings do not state its vocabulary size.",
                "config.json has no vocab_size and no embedding tensor was found",
            )
    tok = info.tokenizer
    if tok is not None and tok.problems:
        out.add(
            f"{role}.tokenizer_invalid",
            BLOCKER,
            f"The {who}'s tokenizer files are damaged.",
            " ".join(tok.problems),
        )
    return True


def _target_findings(t: CheckpointInfo, out: _Findings) -> None:
    if t.kind == KIND_DFLASH:
        out.add(
            "target.is_dflash",
            BLOCKER,
            "This is a DFlash drafter, not a chat model: it only helps the model it was made for.",
            f"architectures={t.architectures}",
        )
        return
    if t.draft_head_ids is not None:
        out.add(
            "target.reduced_head",
            WARNING,
            "This model has a reduced output layer made for drafting; it cannot write every token.",
            "draft_head.json present",
        )
    if t.tokenizer is None:
        out.add(
            "target.no_tokenizer",
            BLOCKER,
            "The target has no tokenizer files, so text cannot be turned into tokens.",
            f"no tokenizer.json/tokenizer_config.json in {t.path}",
        )
    elif not t.has_chat_template:
        out.add(
            "chat_template.target_missing",
            WARNING,
            "The target has no chat template, so it can only continue plain text, not chat.",
            "no chat_template in tokenizer_config.json / chat_template.jinja",
        )


def _emit_ids(d: CheckpointInfo) -> tuple[list[int], str]:
    if d.draft_head_ids is not None:
        return sorted(set(d.draft_head_ids)), "draft_head.json token_ids"
    tok = d.tokenizer
    ids = sorted(tok.id_to_token) if tok else []
    limit = d.effective_vocab
    if limit:
        ids = [i for i in ids if i < limit]
    return ids, "draft tokenizer ids"


def _tokenizer_findings(t: CheckpointInfo, d: CheckpointInfo, out: _Findings) -> None:
    tt, dt = t.tokenizer, d.tokenizer
    if tt is None or tt.problems:
        return  # already a target blocker
    if dt is None:
        if d.draft_head_ids is not None:
            out.add(
                "tokenizer.draft_uses_target",
                NOTE,
                "The draft has no tokenizer of its own and uses the target's.",
                "draft folder has no tokenizer files; draft_head.json present",
            )
        else:
            out.add(
                "tokenizer.draft_missing",
                BLOCKER,
                "The draft has no tokenizer files, so DraftPair cannot prove it speaks the target's language.",
                f"no tokenizer files in {d.path}",
            )
            return
    elif dt.problems:
        return
    if dt is not None and not (tt.mapping_known and dt.mapping_known):
        if tt.file_digest and tt.file_digest == dt.file_digest:
            out.add(
                "tokenizer.identical_files",
                NOTE,
                "Both models ship the same tokenizer file.",
                f"{tt.source} sha256 {tt.file_digest[:12]}",
            )
        else:
            out.add(
                "tokenizer.unverified",
                WARNING,
                "DraftPair could not compare the two tokenizers token by token; the pair may not work.",
                f"target tokenizer source {tt.source}, draft {dt.source}",
            )
        return
    if dt is not None and tt.vocab_type and dt.vocab_type and tt.vocab_type != dt.vocab_type:
        out.add(
            "tokenizer.type_mismatch",
            BLOCKER,
            "The two models split text into tokens in different ways, so their tokens cannot be compared.",
            f"vocab type target={tt.vocab_type} draft={dt.vocab_type}",
        )
        return
    ids, source = _emit_ids(d)
    target_vocab = t.effective_vocab or tt.size
    mismatched: list[tuple[int, str | None, str | None]] = []
    out_of_range = (
        sum(1 for i in ids if i >= target_vocab) if ids and ids[-1] >= target_vocab else 0
    )
    special_diff: list[int] = []
    same_table = (
        dt is not None and tt.id_to_token == dt.id_to_token and tt.special_ids == dt.special_ids
    )
    for i in () if same_table else ids:
        t_text = tt.id_to_token.get(i)
        if i >= target_vocab:
            continue
        if dt is None:  # reduced head without its own tokenizer: the id must exist in the target
            if t_text is None:
                mismatched.append((i, None, "?"))
            continue
        d_text = dt.id_to_token.get(i)
        if t_text != d_text:
            mismatched.append((i, t_text, d_text))
        elif (i in tt.special_ids) != (i in dt.special_ids):
            special_diff.append(i)
    if out_of_range:
        out.add(
            "vocab.draft_ids_out_of_range",
            BLOCKER,
            "The draft can propose tokens that the target does not have.",
            f"{out_of_range} of {len(ids)} {source} are >= target vocabulary {target_vocab}",
        )
    if mismatched:
        examples = ", ".join(f"id {i}: target {a!r} vs draft {b!r}" for i, a, b in mismatched[:3])
        out.add(
            "tokenizer.mapping_mismatch",
            BLOCKER,
            "The two models number their tokens differently, so the target would misread the draft's guesses.",
            f"{len(mismatched)} of {len(ids)} {source} map to different text ({examples})",
        )
    elif ids and not out_of_range:
        out.add(
            "tokenizer.mapping_equal",
            NOTE,
            "Both models use the same tokens.",
            f"all {len(ids)} {source} map to the same text in both tokenizers",
        )
    if special_diff:
        out.add(
            "tokenizer.special_flags_differ",
            WARNING,
            "Some control tokens are marked differently in the two tokenizers.",
            f"{len(special_diff)} ids differ in the 'special' flag, e.g. {special_diff[:5]}",
        )
    extra = sorted(set(tt.id_to_token) - set(ids)) if ids else []
    if extra and dt is not None and d.draft_head_ids is None:
        names = ", ".join(repr(tt.id_to_token[i]) for i in sorted(extra)[:3])
        out.add(
            "tokenizer.target_extra_tokens",
            NOTE,
            f"The target knows {len(extra)} token(s) the draft never proposes; that is fine, the target writes them itself.",
            f"target-only ids {sorted(extra)[:5]} ({names})",
        )
    if dt is None:
        return
    if tt.eos_ids and dt.eos_ids and tt.eos_ids != dt.eos_ids:
        out.add(
            "tokenizer.eos_differs",
            WARNING,
            "The draft ends answers with a different stop token, so it will guess the end of answers badly (output stays correct).",
            f"EOS ids target={sorted(tt.eos_ids)} ({tt.eos_token!r}) draft={sorted(dt.eos_ids)} ({dt.eos_token!r})",
        )
    if tt.add_bos != dt.add_bos or (
        tt.add_bos and tt.token_id(tt.bos_token) != dt.token_id(dt.bos_token)
    ):
        out.add(
            "tokenizer.bos_differs",
            WARNING,
            "The two models start text differently, which lowers how often the draft guesses right.",
            f"add_bos target={tt.add_bos} ({tt.bos_token!r}) draft={dt.add_bos} ({dt.bos_token!r}); llama.cpp rejects this pair",
        )
    if tt.add_eos != dt.add_eos:
        out.add(
            "tokenizer.add_eos_differs",
            WARNING,
            "The two models end text differently.",
            f"add_eos target={tt.add_eos} draft={dt.add_eos}",
        )
    if tt.normalizer != dt.normalizer:
        out.add(
            "tokenizer.normalizer_differs",
            WARNING,
            "The two tokenizers clean up text differently before splitting it.",
            "tokenizer.json normalizer sections differ",
        )
    if tt.pre_tokenizer != dt.pre_tokenizer:
        out.add(
            "tokenizer.pre_tokenizer_differs",
            WARNING,
            "The two tokenizers pre-split text differently.",
            "tokenizer.json pre_tokenizer sections differ",
        )
    if t.has_chat_template and d.has_chat_template and t.chat_template != d.chat_template:
        out.add(
            "chat_template.draft_differs",
            NOTE,
            "The draft's chat template differs; it does not matter, the target's template formats the chat.",
            "chat templates differ",
        )


def _vocab_findings(t: CheckpointInfo, d: CheckpointInfo, out: _Findings) -> None:
    tv, dv = t.effective_vocab, d.effective_vocab
    if d.draft_head_ids is not None:
        out.add(
            "vocab.reduced_head",
            NOTE,
            f"The draft proposes from a reduced list of {len(set(d.draft_head_ids))} tokens.",
            "draft_head.json",
        )
        return
    if tv and dv and dv > tv:
        out.add(
            "vocab.draft_larger",
            BLOCKER,
            "The draft's vocabulary is larger than the target's, so it could propose tokens the target does not have.",
            f"draft vocab_size {dv} > target vocab_size {tv}",
        )
        return
    if tv and dv and abs(tv - dv) > 128:
        out.add(
            "vocab.size_gap",
            NOTE,
            "The vocabulary sizes differ a lot; DraftPair compared the tokens themselves instead.",
            f"|{tv} - {dv}| > 128 (llama.cpp's limit)",
        )
    tt = t.tokenizer
    if tt and tv and tt.size and tv > tt.size:
        out.add(
            "vocab.target_padded",
            NOTE,
            "The target's weights have spare padding rows; that is fine.",
            f"target vocab_size {tv} > tokenizer size {tt.size}",
        )


def _rollback_findings(
    t: CheckpointInfo, kind: str, context: int, out: _Findings, d: CheckpointInfo | None = None
) -> None:
    if t.config is None:
        return
    problem = rewind_problem(t.config)
    if problem:
        out.add(
            "cache.not_trimmable",
            BLOCKER if kind != "none" else WARNING,
            "This target cannot undo rejected guesses, so speculative decoding cannot run on it.",
            problem,
        )
    if d is not None and d.config is not None and kind == "full-model":
        problem = rewind_problem(d.config)
        if problem:
            out.add(
                "cache.draft_not_trimmable",
                BLOCKER,
                "The draft cannot undo rejected guesses, so it cannot be used as a draft.",
                problem,
            )


def rewind_problem(config: dict) -> str | None:
    """The engine's verdict on rewinding a checkpoint's cache after rejected drafts (sliding
    windows and recurrent state are rewound exactly; the session gives the same verdict)."""
    from app.engine.rewind_rules import config_problem

    return config_problem(config)


def _runtime_findings(kind: str, out: _Findings) -> None:
    module = _RUNTIME_MODULES.get(kind)
    if not module:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        out.add(
            "kind.runtime_missing",
            BLOCKER,
            f"This version of DraftPair cannot run {kind.upper() if kind == 'mtp' else 'DFlash'} drafting yet.",
            f"module {module} not found",
        )


def _mtp_findings(t: CheckpointInfo, out: _Findings) -> None:
    cfg = t.cfg()
    declared = cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers")
    if not t.mtp_tensors:
        detail = "no mtp.* / eh_proj tensors in the safetensors headers"
        if declared:
            detail += f" although config declares {declared} MTP layer(s) (a conversion probably dropped them)"
        out.add(
            "mtp.no_weights",
            BLOCKER,
            "This model has no multi-token-prediction head in its files, so MTP drafting is impossible.",
            detail,
        )
        return
    out.add(
        "mtp.weights_present",
        NOTE,
        "The model ships a multi-token-prediction head.",
        f"{len(t.mtp_tensors)} MTP tensors, e.g. {t.mtp_tensors[0]}",
    )
    if t.model_type not in MTP_FAMILIES:
        out.add(
            "mtp.family_unknown",
            WARNING,
            "DraftPair does not know this model family's prediction head and may not run it.",
            f"model_type {t.model_type}",
        )


def _dflash_findings(t: CheckpointInfo, d: CheckpointInfo, out: _Findings) -> None:
    if d.dflash is None:
        out.add(
            "draft.not_dflash",
            BLOCKER,
            "This draft is not a DFlash drafter.",
            f"architectures={d.architectures}; no dflash_config",
        )
        return
    df, tc = d.dflash, t.cfg()
    n_layers = tc.get("num_hidden_layers")
    out.add(
        "dflash.detected",
        NOTE,
        "This is a DFlash drafter.",
        f"layout {df['layout']}, block_size {df['block_size']}, target_layer_ids {df['target_layer_ids']}",
    )
    if df.get("hidden_size") and tc.get("hidden_size") and df["hidden_size"] != tc["hidden_size"]:
        out.add(
            "dflash.hidden_mismatch",
            BLOCKER,
            "This DFlash drafter was made for a different target model.",
            f"draft hidden_size {df['hidden_size']} != target {tc['hidden_size']}",
        )
    if df.get("num_target_layers") and n_layers and df["num_target_layers"] != n_layers:
        out.add(
            "dflash.layers_mismatch",
            BLOCKER,
            "This DFlash drafter was made for a target with a different number of layers.",
            f"num_target_layers {df['num_target_layers']} != target num_hidden_layers {n_layers}",
        )
    ids = df.get("target_layer_ids")
    if not isinstance(ids, list) or not ids:
        out.add(
            "dflash.config_incomplete",
            BLOCKER,
            "The DFlash drafter's settings are incomplete.",
            "dflash_config.target_layer_ids missing",
        )
    elif n_layers and any(not isinstance(i, int) or i >= n_layers for i in ids):
        out.add(
            "dflash.layers_mismatch",
            BLOCKER,
            "This DFlash drafter reads target layers that this target does not have.",
            f"target_layer_ids {ids} vs {n_layers} layers",
        )
    mask = df.get("mask_token_id")
    tv = t.effective_vocab
    if mask is None:
        out.add(
            "dflash.config_incomplete",
            BLOCKER,
            "The DFlash drafter's settings are incomplete.",
            "mask_token_id missing",
        )
    elif tv and mask >= tv:
        out.add(
            "dflash.mask_out_of_range",
            BLOCKER,
            "This DFlash drafter uses a token the target does not have.",
            f"mask_token_id {mask} >= target vocab {tv}",
        )


def _verdict(findings: Iterable[Finding]) -> str:
    sev = {f.severity for f in findings}
    return (
        VERDICT_FAILS if BLOCKER in sev else VERDICT_WARNINGS if WARNING in sev else VERDICT_WORKS
    )


def check(
    target: str | Path | CheckpointInfo,
    draft: str | Path | CheckpointInfo | None = None,
    kind: str | None = None,
    context: int | None = None,
    *,
    width: int | None = None,
    budget: Budget | None = None,
) -> PairingReport:
    """Judge a pairing from config, tokenizer files and safetensors headers (no weights loaded).

    ``context`` defaults to min(4096, the target's trained context).
    Raises ValueError only for an unknown ``kind`` name; anything odd in the files becomes a
    finding, never an exception.
    """
    start = time.perf_counter()
    kind = normalize_kind(kind)
    try:
        return _check(target, draft, kind, context, width=width, budget=budget, start=start)
    except Exception as exc:  # noqa: BLE001 - a settings file we did not foresee
        finding = Finding(
            "check.failed",
            BLOCKER,
            "DraftPair could not make sense of these model files, so it cannot vouch for them.",
            f"{type(exc).__name__}: {exc}",
        )
        name = lambda x: str(x.path if isinstance(x, CheckpointInfo) else x)  # noqa: E731
        return PairingReport(
            target=name(target),
            draft=name(draft) if draft is not None else None,
            kind=kind or ("full-model" if draft is not None else "none"),
            context=int(context or DEFAULT_CONTEXT),
            verdict=VERDICT_FAILS,
            findings=(finding,),
            elapsed_ms=(time.perf_counter() - start) * 1000,
        )


def _check(target, draft, kind, context, *, width, budget, start) -> PairingReport:
    t = _as_info(target)
    if context is None:
        context = min(DEFAULT_CONTEXT, t.context_length or DEFAULT_CONTEXT)
    context = max(int(context), 1)
    d = _as_info(draft) if draft is not None else None
    if kind is None:
        kind = (KIND_DFLASH if d.kind == KIND_DFLASH else "full-model") if d is not None else "none"
    out = _Findings()
    t_ok = _model_findings(t, "target", out)
    if t_ok:
        _target_findings(t, out)
    d_ok = False
    if d is not None:
        if kind in ("none", "prompt-lookup", "mtp"):
            out.add(
                "kind.no_draft_model",
                BLOCKER,
                f"The {kind} mode does not use a draft model; leave the draft out.",
                f"kind={kind}, draft={d.path}",
            )
        else:
            d_ok = _model_findings(d, "draft", out)
    elif kind in ("full-model", "dflash"):
        out.add(
            "kind.needs_draft",
            BLOCKER,
            f"The {kind} mode needs a draft model.",
            f"kind={kind}, no draft given",
        )
    _runtime_findings(kind, out)
    memory = None
    if t_ok and t.config is not None:
        if t.context_length and context > t.context_length:
            out.add(
                "context.too_long",
                WARNING,
                f"The target was trained for at most {t.context_length} tokens of context.",
                f"requested context {context}",
            )
        if kind != "none" or d is not None:
            _rollback_findings(t, kind, context, out, d if d_ok else None)
        if kind == "mtp":
            _mtp_findings(t, out)
        if kind == "none" and d is None and not out.has_blocker("target."):
            _options_note(t, context, out)
        if d is not None and d_ok and d.config is not None:
            if d.path.resolve() == t.path.resolve():
                out.add(
                    "draft.same_as_target",
                    WARNING,
                    "The draft is the target itself, which can never be faster.",
                    str(d.path),
                )
            if kind == "dflash":
                _dflash_findings(t, d, out)
            elif kind == "full-model":
                if d.kind == KIND_DFLASH:
                    out.add(
                        "draft.is_dflash",
                        BLOCKER,
                        "This draft is a DFlash drafter, not a model that writes on its own; use the DFlash mode.",
                        f"architectures={d.architectures}",
                    )
                else:
                    if d.mtp_tensors and len(d.mtp_tensors) == len(
                        d.weights.tensors if d.weights else {}
                    ):
                        out.add(
                            "draft.mtp_only",
                            BLOCKER,
                            "This draft holds only a prediction head, not a full model.",
                            "only MTP tensors",
                        )
                    _vocab_findings(t, d, out)
                    _tokenizer_findings(t, d, out)
                    tp, dp = t.param_count, d.param_count
                    if tp and dp:
                        ratio = dp / tp
                        if ratio >= 1 and d.path.resolve() != t.path.resolve():
                            out.add(
                                "draft.not_smaller",
                                WARNING,
                                "The draft is not smaller than the target, so it will slow things down.",
                                f"draft {dp:,} params vs target {tp:,}",
                            )
                        else:
                            out.add(
                                "draft.size_ratio",
                                NOTE,
                                f"The draft is {ratio:.1%} of the target's size.",
                                f"draft {dp:,} params, target {tp:,}",
                            )
        if not out.has_blocker("target."):
            memory = estimate_memory(
                t, d if d_ok else None, context=context, draft_kind=kind, width=width, budget=budget
            )
            _memory_findings(memory, out)
    findings = tuple(out.items)
    return PairingReport(
        target=str(t.path),
        draft=str(d.path) if d is not None else None,
        kind=kind,
        context=context,
        verdict=_verdict(findings),
        findings=findings,
        memory=memory,
        elapsed_ms=(time.perf_counter() - start) * 1000,
    )


def _options_note(t: CheckpointInfo, context: int, out: _Findings) -> None:
    """Target alone: say which drafting kinds it could use."""
    options = []
    problem = rewind_problem(t.config or {})
    if problem is None:
        options.append("prompt lookup")
        options.append("a draft model with the same tokenizer")
    if t.mtp_tensors:
        options.append("its built-in MTP head")
    if options:
        out.add(
            "target.options",
            NOTE,
            "Speculative decoding can use " + ", ".join(options) + ".",
            f"kind=none; rollback: {problem or 'exact'}",
        )
    else:
        out.add("target.options", NOTE, "This model can only run without speculation.", problem)


def _memory_findings(m: MemoryEstimate, out: _Findings) -> None:
    figures = "; ".join(m.lines())
    if m.budget and m.total > m.budget:
        out.add(
            "memory.over_budget",
            BLOCKER,
            f"This needs about {format_bytes(m.total)} of memory but only {format_bytes(m.budget)} is available to models here.",
            figures,
        )
    elif m.available is not None and m.total > m.available:
        out.add(
            "memory.tight",
            WARNING,
            f"This needs about {format_bytes(m.total)}, more than is free right now ({format_bytes(m.available)}); close other apps first.",
            figures,
        )
    else:
        out.add(
            "memory.fits",
            NOTE,
            f"It fits in memory: about {format_bytes(m.total)} of {format_bytes(m.budget)}.",
            figures,
        )


# --- suggestions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    name: str
    path: Path | None
    kind: str
    report: PairingReport
    reason: str  # one sentence: why it is ranked where it is
    score: float = 0.0


@dataclass(frozen=True)
class Exclusion:
    name: str
    path: Path
    reason: str  # one plain sentence


@dataclass(frozen=True)
class Suggestions:
    target: str
    ranked: tuple[Suggestion, ...]
    excluded: tuple[Exclusion, ...]
    no_model_options: tuple[Suggestion, ...] = field(default=())  # prompt lookup, MTP


def _score(kind: str, report: PairingReport, ratio: float | None) -> float:
    s = 0.0 if report.verdict == VERDICT_WORKS else -10.0
    if kind == "dflash":
        s += 5.0
    if ratio:
        s -= abs(math.log(ratio / 0.08))  # drafts about 1/12 of the target tend to pay best
    return s


def suggest_drafts(
    target: str | Path | CheckpointInfo,
    *,
    store: Store | None = None,
    context: int | None = None,
    budget: Budget | None = None,
    entries: list[StoreEntry] | None = None,
) -> Suggestions:
    """Rank local checkpoints that pair with ``target``; explain each exclusion in one sentence."""
    t = _as_info(target)
    budget = budget or memory_budget()
    if entries is None:
        if store is None:
            from app.checkpoints.store import Store

            store = Store()
        entries = store.list()
    ranked: list[Suggestion] = []
    excluded: list[Exclusion] = []
    t_path = t.path.resolve() if t.path.exists() else t.path
    for e in entries:
        p = Path(e.path)
        if (p.resolve() if p.exists() else p) == t_path:
            excluded.append(Exclusion(e.name, p, "This is the target itself."))
            continue
        info = inspect_checkpoint(p)  # store listings skip tokenizer files; pairing needs them
        if info.kind == KIND_UNSUPPORTED:
            excluded.append(
                Exclusion(e.name, p, info.unsupported_reason or "DraftPair cannot use it.")
            )
            continue
        kind = "dflash" if info.kind == KIND_DFLASH else "full-model"
        report = check(t, info, kind=kind, context=context, budget=budget)
        if report.verdict == VERDICT_FAILS:
            excluded.append(Exclusion(e.name, p, report.blockers[0].message))
            continue
        ratio = (info.param_count / t.param_count) if info.param_count and t.param_count else None
        if ratio is not None and ratio >= 1:
            excluded.append(
                Exclusion(
                    e.name, p, "It is not smaller than the target, so it cannot make it faster."
                )
            )
            continue
        if kind == "dflash":
            reason = "A DFlash drafter made for this target: usually the fastest option."
        elif ratio is not None:
            reason = f"Same tokens as the target, {ratio:.1%} of its size."
        else:
            reason = "Same tokens as the target."
        if report.verdict == VERDICT_WARNINGS:
            reason += f" Warning: {report.warnings[0].message}"
        ranked.append(Suggestion(e.name, p, kind, report, reason, _score(kind, report, ratio)))
    ranked.sort(key=lambda s: -s.score)
    options: list[Suggestion] = []
    if t.config is not None:
        for kind, label in (
            ("prompt-lookup", "prompt lookup (no draft model)"),
            ("mtp", "MTP head (built into the target)"),
        ):
            if kind == "mtp" and not t.mtp_tensors:
                continue
            report = check(t, None, kind=kind, context=context, budget=budget)
            reason = (
                "Copies likely continuations from the prompt; best for edits and rewrites."
                if kind == "prompt-lookup"
                else "Uses the prediction head shipped inside the target."
            )
            options.append(
                Suggestion(label, None, kind, report, reason if report.works else report.summary())
            )
    return Suggestions(str(t.path), tuple(ranked), tuple(excluded), tuple(options))
