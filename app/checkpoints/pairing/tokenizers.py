"""Tokenizer compatibility: the draft's ids mean the same text to the target, vocab sizes."""

from __future__ import annotations

from app.checkpoints.inspect import CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList


def emit_ids(d: CheckpointInfo) -> tuple[list[int], str]:
    if d.draft_head_ids is not None:
        return sorted(set(d.draft_head_ids)), "draft_head.json token_ids"
    tok = d.tokenizer
    ids = sorted(tok.id_to_token) if tok else []
    limit = d.effective_vocab
    if limit:
        ids = [i for i in ids if i < limit]
    return ids, "draft tokenizer ids"


def tokenizer_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
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
    ids, source = emit_ids(d)
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


def vocab_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
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
