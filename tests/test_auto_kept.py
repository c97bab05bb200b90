"""Auto in a kept conversation: the next turn reads only its new tokens, and every member
goes on from the conversation — the draft model from its own kept cache, the text drafters
from the committed text — so the replies are the ones a session that keeps nothing gives."""

from __future__ import annotations

from app.engine.events import DoneEvent, GenerationRequest
from app.engine.prompt_cache import common_prefix
from app.engine.session import Session
from tests.test_auto import AUTO, flat_session, pair  # noqa: F401 - the module's tiny pair

TURNS = ["The cat sat on the mat.", "The dog sat on the log. The cat sat on the mat.",
         "Say it again: the cat sat on the mat."]


def _chat(s: Session, *, reuse: bool) -> list[tuple[DoneEvent, list[int]]]:
    messages: list[dict[str, str]] = []
    out = []
    for text in TURNS:
        messages.append({"role": "user", "content": text})
        req = GenerationRequest(messages=tuple(messages), max_tokens=24, draft_kind=AUTO,
                                allow_fallback=False, reuse_cache=reuse,
                                conversation="chat" if reuse else None)
        done = list(s.generate(req))[-1]
        assert isinstance(done, DoneEvent) and done.finish_reason != "error", done.error
        out.append((done, s.encode(req)))
        messages.append({"role": "assistant", "content": done.text})
    return out


def test_auto_turns_read_only_their_new_tokens_and_stay_exact(pair):  # noqa: F811
    fresh = _chat(flat_session(pair), reuse=False)
    kept_session = flat_session(pair)
    kept = _chat(kept_session, reuse=True)
    for i, ((a, _), (b, prompt)) in enumerate(zip(fresh, kept, strict=True)):
        assert b.token_ids == a.token_ids, i
        assert b.timings.draft_rounds > 0 and b.timings.fallback is None, i
        assert b.timings.prompt_n + b.timings.cache_n == len(prompt), i
        if i:
            prev, prev_prompt = kept[i - 1]
            common = min(common_prefix(prompt, prev_prompt + list(prev.token_ids)),
                         len(prompt) - 1)
            # all the conversation kept that this prompt repeats (the reply's last token was
            # never read by the target: it ended the reply)
            assert common - 1 <= b.timings.cache_n <= common, i
            assert b.timings.cache_n >= len(prev_prompt) - 1, i
    # the draft model member went on from its kept cache: the store holds its state
    kept_states = [c for c in kept_session.prompt_cache._entries.values() if c.drafters]
    assert kept_states, "the draft model's state was not kept"
