"""EAGLE-3 drafting: the drafter was made for this target (hidden size, the layers it reads,
its vocabulary and the table mapping it to the target's, the target family it names).
One sentence per refusal."""

from __future__ import annotations

from app.checkpoints.eagle3_config import reads_layers
from app.checkpoints.inspect import CheckpointInfo
from app.checkpoints.pairing.report import BLOCKER, NOTE, WARNING, FindingList


def eagle3_findings(t: CheckpointInfo, d: CheckpointInfo, out: FindingList) -> None:
    e = d.eagle3
    if e is None:
        out.add("draft.not_eagle3", BLOCKER, "This draft is not an EAGLE-3 drafter.",
                f"architectures={d.architectures}; no EAGLE-3 settings")
        return
    tc = t.cfg()
    n_layers = tc.get("num_hidden_layers")
    hidden = tc.get("hidden_size")
    ids = reads_layers(e, n_layers) if isinstance(n_layers, int) else e.get("layer_ids")
    out.add("eagle3.detected", NOTE, "This is an EAGLE-3 drafter.",
            f"layout {e['layout']}, reads hidden_states {ids}, draft vocabulary "
            f"{e['draft_vocab_size']}" + ("" if e.get("layer_ids") else " (the paper's layers)"))
    missing = [k for k in ("hidden_size", "num_attention_heads", "intermediate_size",
                           "vocab_size") if not e.get(k)]
    if missing:
        out.add("eagle3.config_incomplete", BLOCKER, "The EAGLE-3 drafter's settings are "
                "incomplete.", f"missing {', '.join(missing)}")
        return
    if isinstance(hidden, int) and e["target_hidden_size"] != hidden:
        out.add("eagle3.hidden_mismatch", BLOCKER,
                "This EAGLE-3 drafter was made for a model of another width.",
                f"drafter target_hidden_size {e['target_hidden_size']} != target hidden_size "
                f"{hidden}")
    if isinstance(n_layers, int) and ids and any(not 1 <= i <= n_layers for i in ids):
        out.add("eagle3.layers_mismatch", BLOCKER,
                "This EAGLE-3 drafter reads layers this model does not have.",
                f"hidden_states {ids} vs {n_layers} layers (valid: 1..{n_layers})")
    tv = t.effective_vocab
    if tv and e["vocab_size"] != tv:
        out.add("eagle3.vocab_mismatch", BLOCKER,
                "This EAGLE-3 drafter was made for a model with a different vocabulary.",
                f"drafter vocab_size {e['vocab_size']} != target vocab {tv}")
    names = set(d.weights.tensors) if d.weights else set()
    bare = {n.removeprefix("model.") for n in names}
    if e["draft_vocab_size"] != e["vocab_size"] and "d2t" not in bare:
        out.add("eagle3.no_d2t", BLOCKER,
                "This EAGLE-3 drafter's own vocabulary has no table (d2t) mapping it to the "
                "model's tokens.",
                f"draft_vocab_size {e['draft_vocab_size']} != vocab_size {e['vocab_size']}; "
                "no d2t tensor")
    v_archs = e.get("verifier_archs") or []
    if v_archs and t.architectures and not set(v_archs) & set(t.architectures):
        out.add("eagle3.other_family", BLOCKER,
                f"This EAGLE-3 drafter was made for a {v_archs[0]} model, not this "
                f"{t.architectures[0]}.",
                f"speculators_config.verifier {e.get('verifier_name') or ''} {v_archs}")
    elif e.get("verifier_name") and not out.has_blocker("eagle3."):
        name = str(e["verifier_name"]).rstrip("/").rsplit("/", 1)[-1].lower()
        if name and name not in t.name.lower():
            out.add("eagle3.other_revision", WARNING,
                    f"This EAGLE-3 drafter was trained for {e['verifier_name']}; with another "
                    "model it stays exact but may guess poorly.",
                    f"target folder {t.name}")
