"""Checks on one checkpoint alone: readable, safe, runnable; what a lone target can use."""

from __future__ import annotations

from pathlib import Path

from app.checkpoints.config_ranges import config_range_problem, remote_code_tokenizer
from app.checkpoints.inspect import (
    DRAFTER_FOLDER_KINDS,
    KIND_DFLASH,
    KIND_EAGLE3,
    KIND_GEMMA4_ASSISTANT,
    KIND_UNSUPPORTED,
    CheckpointInfo,
    inspect_checkpoint,
)
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList
from app.checkpoints.rewind_rules import config_problem
from app.fileio import special_files


def as_info(x: str | Path | CheckpointInfo) -> CheckpointInfo:
    if isinstance(x, CheckpointInfo):
        # store listings skip tokenizer files; every pairing judgement needs them
        if x.tokenizer is None and x.path.is_dir():
            return inspect_checkpoint(x.path)
        return x
    return inspect_checkpoint(Path(x))


def role_name(role: str) -> str:
    return "target" if role == "target" else "draft"


def model_findings(info: CheckpointInfo, role: str, out: FindingList) -> bool:
    """Checks on one checkpoint alone. Returns False when nothing else can be judged."""
    who = role_name(role)
    p = info.path
    if not p.exists():
        out.add(f"{role}.missing", BLOCKER, f"The {who} folder does not exist.", str(p))
        return False
    if not p.is_dir():
        out.add(f"{role}.not_folder", BLOCKER, f"The {who} is a file, not a model folder.", str(p))
        return False
    special = special_files(p)
    if special:
        name, kind = special[0]
        out.add(f"{role}.special_file", BLOCKER, f"{name} in the {who} folder is {kind}, not an "
                "ordinary file, so DraftPair does not load this folder.", f"{p / name}: {kind}")
        return False
    if info.config is None:
        out.add(
            f"{role}.config_invalid",
            BLOCKER,
            f"The {who}'s settings file is missing or damaged, so it cannot be used.",
            f"{p / 'config.json'}: {info.config_error}",
        )
        return False
    problem = config_range_problem(info.config, "config.json")
    if problem:
        out.add(f"{role}.config_range", BLOCKER, f"The {who}'s settings are out of range: "
                f"{problem[:1].lower()}{problem[1:]}", f"{p / 'config.json'}: {problem}")
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
    if info.kind in DRAFTER_FOLDER_KINDS:
        return True  # DFlash and EAGLE-3 drafters are judged by their kinds' checks
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
    needs_code = remote_code_tokenizer(p)
    if needs_code:
        out.add(f"{role}.tokenizer_remote_code", BLOCKER,
                f"The {who}'s tokenizer needs its own Python code ({needs_code}), which DraftPair "
                "never runs.", "tokenizer_config.json auto_map.AutoTokenizer")
    elif tok is not None and tok.problems:
        out.add(
            f"{role}.tokenizer_invalid",
            BLOCKER,
            f"The {who}'s tokenizer files are damaged.",
            " ".join(tok.problems),
        )
    return True


def target_findings(t: CheckpointInfo, out: FindingList) -> None:
    if t.kind == KIND_DFLASH:
        out.add(
            "target.is_dflash",
            BLOCKER,
            "This is a DFlash drafter, not a chat model: it only helps the model it was made for.",
            f"architectures={t.architectures}",
        )
        return
    if t.kind == KIND_EAGLE3:
        out.add(
            "target.is_eagle3",
            BLOCKER,
            "This is an EAGLE-3 drafter, not a chat model: it only helps the model it was made for.",
            f"architectures={t.architectures}",
        )
        return
    if t.kind == KIND_GEMMA4_ASSISTANT:
        out.add(
            "target.is_gemma4_assistant",
            BLOCKER,
            "This is a Gemma 4 assistant, not a chat model: it only helps the model it was "
            "published with.",
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
            "The target has no chat template (a base model): chat joins the turns as plain "
            "text, and it continues text best.",
            "no chat_template in tokenizer_config.json / chat_template.jinja",
        )
    elif t.chat_template:
        refused = template_refusal(t)
        if refused:
            out.add("chat_template.refused", BLOCKER, refused, "the chat template was filled in "
                    "with a sample conversation under the size, step and time limits")


def template_refusal(t: CheckpointInfo) -> str | None:
    """The plain sentence refusing the model's chat template (a mistake in it, or a sample
    conversation that takes more than the limits), None when it fills in."""
    from app.checkpoints.chat_prompt import template_source
    from app.checkpoints.chat_template import check_template

    tok = t.tokenizer
    variables = {k: v for k, v in (("bos_token", tok and tok.bos_token),
                                   ("eos_token", tok and tok.eos_token),
                                   ("pad_token", tok and tok.pad_token)) if v}
    return check_template(str(t.chat_template), model=t.path.name, variables=variables,
                          source=template_source(t.path))


def options_note(t: CheckpointInfo, context: int, out: FindingList) -> None:
    """Target alone: say which drafting kinds it could use."""
    options = []
    problem = config_problem(t.config or {})
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
        out.add("target.options", NOTE, "This model can only run without speculation.",
                problem or "")
