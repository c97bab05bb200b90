"""Teacher data for the demo draft: greedy replies of the demo target to varied prompts.

Records go to ``WORKDIR/shards/*.jsonl`` (one JSON object a line: index, id, kind,
prompt_ids, reply_ids, finish), appended and flushed one by one, so an interrupted run loses
at most the replies in flight. A restart skips every prompt index already recorded.
Held-out prompts (``prompts.is_heldout``) go to ``WORKDIR/heldout.jsonl`` and are never
trained on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from app.demo.prompts import make_prompt, prompt_stream

Log = Callable[[str], None]


def read_jsonl(path: Path) -> Iterator[dict]:
    """Records of a JSONL file, skipping a torn last line."""
    try:
        fh = open(path, encoding="utf-8")
    except OSError:
        return
    with fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except ValueError:
                continue


def shard_files(workdir: Path) -> list[Path]:
    return sorted((workdir / "shards").glob("*.jsonl"))


def load_records(workdir: Path) -> list[dict]:
    out: list[dict] = []
    for f in shard_files(workdir):
        out.extend(read_jsonl(f))
    return out


def load_heldout(workdir: Path, *, with_self: bool = False) -> list[dict]:
    """Held-out records: the prompt generator's (its prompts are rebuilt from their index),
    with ``with_self`` also replies to held-out self-sampled requests (``self_requests``)."""
    return [r for r in read_jsonl(workdir / "heldout.jsonl")
            if with_self or r.get("kind") != "self"]


def count_tokens(workdir: Path) -> tuple[int, int]:
    """(records, reply tokens) generated so far."""
    n = t = 0
    for r in load_records(workdir):
        n += 1
        t += len(r["reply_ids"])
    return n, t


def encode_prompt(tokenizer, messages: list[dict]) -> list[int]:
    from app.checkpoints.chat_prompt import chat_tokens

    return chat_tokens(tokenizer, messages)


def _prompt_key(p: dict) -> str:
    return json.dumps(p["messages"], sort_keys=True)


class TeacherGenerator:
    """Continuous-batching greedy generation of teacher replies, resumable."""

    def __init__(self, workdir: Path, model, tokenizer, *, batch: int = 24,
                 max_tokens: int = 256, seed: int = 0, topk: int = 8, log: Log = print):
        self.workdir = workdir
        self.model = model
        self.tok = tokenizer
        self.batch = batch
        self.max_tokens = max_tokens
        self.seed = seed
        self.topk = topk
        self.log = log
        (workdir / "shards").mkdir(parents=True, exist_ok=True)
        self.eos = int(tokenizer.eos_token_id)
        self._shard: Path | None = None  # this run's shard for prompts from elsewhere

    def _run(self, todo: Iterator[tuple[int, dict]], out_path: Path, *, seconds: float | None,
             max_records: int | None) -> tuple[int, int]:
        import mlx.core as mx
        from mlx_lm.generate import BatchGenerator

        from app.engine.mlx_types import float_rows, int_rows

        gen = BatchGenerator(
            self.model,
            stop_tokens=[[t] for t in self.tok.eos_token_ids],
            completion_batch_size=self.batch,
            prefill_batch_size=min(8, self.batch),
            max_tokens=self.max_tokens,
        )
        active: dict[int, tuple[int, dict, list[int], list[int], list, list]] = {}
        start = time.monotonic()
        n_rec = n_tok = 0
        exhausted = False
        last_log = start
        with open(out_path, "a", encoding="utf-8") as out:
            while True:
                out_of_time = seconds is not None and time.monotonic() - start > seconds
                enough = max_records is not None and n_rec + len(active) >= max_records
                while not (exhausted or out_of_time or enough) and len(active) < self.batch:
                    try:
                        idx, p = next(todo)
                    except StopIteration:
                        exhausted = True
                        break
                    ids = encode_prompt(self.tok, p["messages"])
                    uid = gen.insert([ids], [self.max_tokens])[0]
                    active[uid] = (idx, p, ids, [], [], [])
                    enough = max_records is not None and n_rec + len(active) >= max_records
                if not active:
                    break
                if out_of_time:
                    break  # drop the replies in flight; they are regenerated next time
                responses = gen.next_generated()
                top_ids: list[list[int]] | None = None
                top_lp: list[list[float]] = []
                if self.topk and responses:
                    # the target's top-k log-probs at every reply position (soft labels)
                    lp = mx.stack([r.logprobs for r in responses])
                    ti = mx.argpartition(-lp, kth=self.topk - 1, axis=-1)[:, : self.topk]
                    tv = mx.take_along_axis(lp, ti, axis=-1)
                    top_ids, top_lp = int_rows(ti), float_rows(tv)
                for j, r in enumerate(responses):
                    entry = active.get(r.uid)
                    if entry is None:
                        continue
                    if r.finish_reason != "stop":
                        entry[3].append(int(r.token))
                    if top_ids is not None:
                        entry[4].append(top_ids[j])
                        entry[5].append([round(v, 3) for v in top_lp[j]])
                    if r.finish_reason is not None:
                        idx, p, ids, reply, tk_ids, tk_lp = active.pop(r.uid)
                        if r.finish_reason == "stop":
                            reply.append(self.eos)
                        rec = {
                            "index": idx, "id": p["id"], "kind": p["kind"],
                            "prompt_ids": ids, "reply_ids": reply, "finish": r.finish_reason,
                        }
                        if top_ids is not None and len(tk_ids) == len(reply):
                            rec["topk_ids"] = tk_ids
                            rec["topk_lp"] = tk_lp
                        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
                        out.flush()
                        n_rec += 1
                        n_tok += len(reply)
                now = time.monotonic()
                if now - last_log > 120:
                    last_log = now
                    self.log(f"gen: +{n_rec} replies, +{n_tok} tokens this run "
                             f"({n_tok / (now - start):.1f} tok/s)")
        gen.close()
        return n_rec, n_tok

    def generate_heldout(self, n: int) -> None:
        path = self.workdir / "heldout.jsonl"
        have = {r["index"] for r in load_heldout(self.workdir)}
        if len(have) >= n:
            return
        stream = prompt_stream(0, self.seed, heldout=True)
        wanted: list[tuple[int, dict]] = []
        seen: set[str] = set()
        for idx, p in stream:
            key = _prompt_key(p)
            if key in seen:
                continue
            seen.add(key)
            wanted.append((idx, p))
            if len(wanted) >= n:
                break
        todo = iter([(i, p) for i, p in wanted if i not in have])
        self.log(f"gen: held-out set, {n - len(have)} prompts")
        self._run(todo, path, seconds=None, max_records=None)

    def generate(self, *, seconds: float | None = None, max_records: int | None = None
                 ) -> tuple[int, int]:
        done: set[int] = set()
        seen: set[str] = set()
        for r in load_records(self.workdir):
            if r.get("kind") != "self":  # replies to sampled requests have their own indices
                done.add(r["index"])
        max_done = max(done, default=-1)

        def todo() -> Iterator[tuple[int, dict]]:
            for idx, p in prompt_stream(0, self.seed, heldout=False):
                key = _prompt_key(p)
                if key in seen:
                    continue  # duplicate prompt: same greedy reply, no new information
                seen.add(key)
                if idx in done:
                    continue
                if idx > max_done + 100000:
                    return
                yield idx, p

        shard = self.workdir / "shards" / f"gen-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        return self._run(todo(), shard, seconds=seconds, max_records=max_records)


    def run_prompts(self, todo: Iterator[tuple[int, dict]], *, heldout: bool,
                    seconds: float | None = None) -> tuple[int, int]:
        """Answer ``(index, prompt)`` pairs from elsewhere (sampled requests) into the
        held-out file or this run's shard; (replies, tokens)."""
        if heldout:
            path = self.workdir / "heldout.jsonl"
        else:
            if self._shard is None:
                self._shard = (self.workdir / "shards"
                               / f"self-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
            path = self._shard
        return self._run(todo, path, seconds=seconds, max_records=None)


def prompt_for(record: dict, seed: int = 0) -> dict:
    return make_prompt(int(record["index"]), seed)
