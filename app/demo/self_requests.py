"""Requests the demo target imagines itself: teacher data worded the way people chat.

An instruction-tuned model sampled from an empty user turn (its chat template up to where the
user's text would start) writes the kind of request it was tuned on — the "Magpie" recipe
(Xu et al., 2024). The programmatic prompt generator (``prompts.py``) covers tasks by
template; these requests cover everyday wording no template has, so a drafter trained on the
target's replies to both fits the replies people actually get. None of them is hand-written,
and none comes from the hand-written chat requests the demo drafters are measured on
(``chat_prompts.py``).

``WORKDIR/self_requests.jsonl`` holds the sampled requests (one JSON object a line: n, text),
appended as they are sampled; replies go through the teacher generator like any prompt, with
record indices from ``INDEX_BASE`` up, one in ``HELDOUT_EVERY`` to the held-out file. Both
steps resume: a request already answered is not answered again.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from app.checkpoints.chat_prompt import chat_text
from app.demo import teacher

INDEX_BASE = 1_000_000_000  # record indices of self requests (generator indices stay below)
HELDOUT_EVERY = 25
FILE = "self_requests.jsonl"
MARK = "\x00"

Log = Callable[[str], None]


def request_prefix(tokenizer) -> list[int]:
    """Token ids of the chat template up to where a user's request starts."""
    text = chat_text(tokenizer, [{"role": "user", "content": MARK}], add_generation_prompt=False)
    head = text.split(MARK)[0]
    return list(tokenizer.encode(head, add_special_tokens=False))


def is_self_key(key: str) -> bool:
    """Whether a feature-store key (``split:index``) belongs to a reply to a sampled request."""
    return int(key.rsplit(":", 1)[1]) >= INDEX_BASE


_STOP = frozenset("a an the i im i'm is it to of and or for in on my me you your what how do "
                  "does can could would should why with be are at this that some any but "
                  "when not aren't isn't don't there their they them as so if".split())


def request_text(tokenizer, prompt_ids: list[int]) -> str:
    """The user's words of a one-turn chat prompt (as ``teacher.encode_prompt`` builds it)."""
    text = chat_text(tokenizer, [{"role": "user", "content": MARK}], add_generation_prompt=True)
    head, tail = text.split(MARK)
    full = tokenizer.decode(list(prompt_ids))
    if full.startswith(head):
        full = full[len(head):]
    return full[: -len(tail)] if tail and full.endswith(tail) else full


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def normalised(text: str) -> str:
    """Case, spacing and punctuation aside: the key two requests are the same by."""
    return " ".join(_words(text))


def like_a_measured_prompt(text: str) -> bool:
    """Close to one of the hand-written requests the demo drafters are measured on (half or
    more of the content words shared): never trained on, so the measurement stays honest."""
    from app.demo.chat_prompts import CHAT_PROMPTS

    def content(t: str) -> set[str]:  # content words, plural or not
        return {w[:-1] if len(w) > 3 and w.endswith("s") else w
                for w in _words(t) if w not in _STOP}

    mine = content(text)
    for prompt in CHAT_PROMPTS:
        theirs = content(prompt)
        if mine and theirs and len(mine & theirs) / len(mine | theirs) >= 0.5:
            return True
    return False


def usable(text: str, seen: set[str]) -> bool:
    """A request worth answering: a few words to a paragraph, readable, new, and not like a
    request the drafters are measured on."""
    words = text.split()
    if not 3 <= len(words) <= 90:
        return False
    if "<|" in text or "|>" in text:
        return False
    printable = sum(ch.isprintable() or ch in "\n\t" for ch in text)
    if printable < len(text) or sum(ch.isascii() for ch in text) < 0.95 * len(text):
        return False
    key = normalised(text)
    if key in seen or like_a_measured_prompt(text):
        return False
    seen.add(key)
    return True


def load_requests(workdir: Path) -> list[dict]:
    return list(teacher.read_jsonl(workdir / FILE))


def sample_requests(model, tokenizer, workdir: Path, n: int, *, batch: int = 32,
                    temp: float = 0.8, top_p: float = 0.95, max_tokens: int = 96,
                    seed: int = 0, log: Log = print) -> int:
    """Sample batches until ``n`` more usable requests are in ``workdir`` (every usable one of
    the last batch is kept), drawing at most ``4 * max(n, batch)``; returns how many were
    added."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    have = load_requests(workdir)
    seen: set[str] = set()
    for r in have:
        seen.add(normalised(r["text"]))
    # numbers continue after the requests here and after every answered one, and an answered
    # request is not asked again (replies restored from the archive come without the
    # requests file: their prompts are read back from the tokens)
    answered = [r for r in teacher.load_records(workdir)
                + teacher.load_heldout(workdir, with_self=True) if r.get("kind") == "self"]
    for r in answered:
        seen.add(normalised(request_text(tokenizer, r["prompt_ids"])))
    next_n = max([int(r["n"]) for r in have]
                 + [int(r["index"]) - INDEX_BASE for r in answered], default=-1) + 1
    mx.random.seed(seed + next_n)  # a resumed run does not redraw the same requests
    prefix = request_prefix(tokenizer)
    end_ids = {int(t) for t in tokenizer.eos_token_ids}
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if hasattr(
        tokenizer, "convert_tokens_to_ids") else None
    if isinstance(im_end, int) and im_end >= 0:
        end_ids.add(im_end)
    added = drawn = 0
    path = workdir / FILE
    torn = path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
    with open(path, "a", encoding="utf-8") as out:
        if torn:
            out.write("\n")  # an interrupted write: the next request starts on its own line
        while added < n and drawn + batch <= 4 * max(n, batch):
            gen = BatchGenerator(model, stop_tokens=[[t] for t in sorted(end_ids)],
                                 sampler=make_sampler(temp=temp, top_p=top_p),
                                 completion_batch_size=batch, prefill_batch_size=batch,
                                 max_tokens=max_tokens)
            uids = gen.insert([prefix] * batch, [max_tokens] * batch)
            texts: dict[int, list[int]] = {u: [] for u in uids}
            finished: dict[int, str] = {}
            while len(finished) < len(uids):
                for r in gen.next_generated():
                    if r.finish_reason != "stop":
                        texts[r.uid].append(int(r.token))
                    if r.finish_reason is not None:
                        finished[r.uid] = r.finish_reason
            gen.close()
            drawn += batch
            for u in uids:
                if finished.get(u) != "stop":
                    continue  # cut off at the length cap: not a whole request
                text = tokenizer.decode(texts[u]).strip()
                if usable(text, seen):
                    out.write(json.dumps({"n": next_n, "text": text}, ensure_ascii=False) + "\n")
                    out.flush()
                    next_n += 1
                    added += 1
    log(f"self requests: +{added} of {drawn} sampled ({len(have) + added} in {workdir / FILE})")
    return added


def prompt_of(request: dict) -> tuple[int, dict, bool]:
    """(record index, teacher prompt, held out) of a sampled request."""
    n = int(request["n"])
    prompt = {"id": f"self-{n}", "kind": "self",
              "messages": [{"role": "user", "content": request["text"]}]}
    return INDEX_BASE + n, prompt, n % HELDOUT_EVERY == HELDOUT_EVERY - 1


def unanswered(workdir: Path, *, heldout: bool) -> Iterator[tuple[int, dict]]:
    recs = (teacher.load_heldout(workdir, with_self=True) if heldout
            else teacher.load_records(workdir))
    done = {int(r["index"]) for r in recs}
    for req in load_requests(workdir):
        idx, prompt, held = prompt_of(req)
        if held == heldout and idx not in done:
            yield idx, prompt


def generate(model, tokenizer, workdir: Path, *, minutes: float, batch: int = 32,
             requests_per_round: int = 96, max_tokens: int = 256,
             max_requests: int | None = None, log: Log = print) -> tuple[int, int]:
    """Sample requests and answer them greedily until ``minutes`` are up (or the requests
    file holds ``max_requests`` and all are answered); (replies, tokens) of this run."""
    workdir = Path(workdir)
    (workdir / "shards").mkdir(parents=True, exist_ok=True)
    gen = teacher.TeacherGenerator(workdir, model, tokenizer, batch=batch,
                                   max_tokens=max_tokens, topk=0, log=log)
    start = time.monotonic()
    n_rec = n_tok = 0

    def left() -> float:
        return minutes * 60 - (time.monotonic() - start)

    while left() > 0:
        if not any(True for h in (False, True) for _ in unanswered(workdir, heldout=h)):
            have = len(load_requests(workdir))
            want = requests_per_round
            if max_requests is not None:
                want = min(want, max_requests - have)
            if want <= 0 or not sample_requests(model, tokenizer, workdir, want,
                                                batch=batch, log=log):
                break
        gen.run_prompts(unanswered(workdir, heldout=True), heldout=True, seconds=left())
        r, t = gen.run_prompts(unanswered(workdir, heldout=False), heldout=False,
                               seconds=left())
        n_rec, n_tok = n_rec + r, n_tok + t
        log(f"self replies: +{n_rec} replies, +{n_tok} tokens "
            f"({n_tok / max(time.monotonic() - start, 1e-9):.0f} tok/s overall)")
    return n_rec, n_tok
