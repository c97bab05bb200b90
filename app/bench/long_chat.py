"""Long conversations: time to first token per turn with and without prompt-cache reuse, and
how long a Stop takes during a long prompt.

    draftpair long-chat [--model demo] [--turns 6] [--repeats 2] [--stop-tokens 5000]

A scripted chat (each user turn pastes a paragraph and asks about it) runs with reuse off and
on, alternating, greedy, so both see the same prompts; TTFT, prompt tokens processed
(``prompt_n``) and reused (``cache_n``) are printed for every turn (medians over repeats).
Then a prompt of ``--stop-tokens`` tokens is started and stopped after a delay: the time from
Stop to the engine being idle (the old one-pass prefill stopped only after reading it all).
``read`` compares reading a whole prompt in timed chunks with one pass (the price of a Stop
that acts at once). The CPU time other processes used meanwhile is printed: on a shared
machine compare ratios, not absolute times.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

PARAGRAPH = (
    "Our team moved the nightly build from a single large machine to a pool of small ones. "
    "Builds now start sooner, but the cache of compiled objects is no longer shared, so a "
    "clean build takes longer than before and the first build of the day is the slowest. "
    "We are considering a shared cache server, a warm-up job at six in the morning, or "
    "keeping one large machine for the first build only. "
)
QUESTIONS = [
    "Summarise this note in two sentences.",
    "What is the main trade-off it describes?",
    "Which of the three options would you pick, and why?",
    "Rewrite the note for a non-technical manager.",
    "List two risks of the shared cache server.",
    "Suggest a title for the note.",
    "What should we measure first?",
    "Write one follow-up question for the team.",
]


def _other_cores(r0, r1) -> float:
    wall = max(r1.t - r0.t, 1e-9)
    return max(0.0, ((r1.machine_busy_s - r0.machine_busy_s) - (r1.own_s - r0.own_s)) / wall)


def conversation(session, turns: int, reuse: bool, max_tokens: int) -> list[dict]:
    from app.engine.events import DoneEvent, GenerationRequest

    session.prompt_cache.clear()
    msgs: list[dict] = []
    rows = []
    for i in range(turns):
        msgs.append({"role": "user", "content": f"{PARAGRAPH}\n\n{QUESTIONS[i % len(QUESTIONS)]}"})
        done = None
        for ev in session.generate(GenerationRequest(messages=tuple(msgs), max_tokens=max_tokens,
                                                     reuse_cache=reuse)):
            if isinstance(ev, DoneEvent):
                done = ev
        assert done is not None and done.finish_reason != "error", done
        msgs.append({"role": "assistant", "content": done.text})
        t = done.timings
        rows.append({"turn": i + 1, "ttft_ms": t.ttft_ms, "prompt_n": t.prompt_n,
                     "cache_n": t.cache_n, "tokens": list(done.token_ids)})
    session.prompt_cache.clear()
    return rows


def stop_to_idle(session, n_tokens: int, delay_s: float) -> dict:
    """Start a prompt of ``n_tokens``, press Stop after ``delay_s``: seconds until idle."""
    from app.engine.events import DoneEvent, GenerationRequest, PrefillEvent

    text = (PARAGRAPH * (n_tokens // 60 + 2))
    ids = session.target.tokenizer.encode(text)[:n_tokens]
    cancel = threading.Event()
    out: dict = {}

    def work() -> None:
        for ev in session.generate(GenerationRequest(prompt_tokens=tuple(ids), max_tokens=4),
                                   cancel=cancel):
            if isinstance(ev, PrefillEvent):
                out["read"] = ev.done
            if isinstance(ev, DoneEvent):
                out["done_at"] = time.perf_counter()
                out["finish"] = ev.finish_reason
                out["prompt_ms"] = ev.timings.prompt_ms

    th = threading.Thread(target=work)
    th.start()
    time.sleep(delay_s)
    t_stop = time.perf_counter()
    cancel.set()
    th.join()
    return {"delay_s": delay_s, "stop_to_idle_ms": (out["done_at"] - t_stop) * 1e3,
            "read_tokens": out.get("read", 0), "finish": out["finish"]}


def one_pass_prefill_ms(session, n_tokens: int, step: int = 2048) -> float:
    """The old prefill: 2048-token steps with no Stop between them (time to read it all)."""
    import mlx.core as mx

    from app.engine.models import make_cache

    ids = session.target.tokenizer.encode(PARAGRAPH * (n_tokens // 60 + 2))[:n_tokens]
    cache = make_cache(session.target)
    t0 = time.perf_counter()
    for s in range(0, len(ids), step):  # as the earlier loop: cache states, then last logits
        out = session.target.model(mx.array(ids[s : s + step])[None], cache=cache)
        mx.eval([c.state for c in cache])
    mx.eval(out[0, -1:])
    return (time.perf_counter() - t0) * 1e3


def full_read_ms(session, n_tokens: int) -> tuple[float, float]:
    """Reading a whole ``n_tokens`` prompt: chunked (as the engine does) vs one pass."""
    import mlx.core as mx

    from app.engine import prefill
    from app.engine.models import make_cache

    ids = session.target.tokenizer.encode(PARAGRAPH * (n_tokens // 60 + 2))[:n_tokens]
    cache = make_cache(session.target)

    last: list = []

    def feed(part):  # as the engine's prefill: logits stay lazy, the last chunk's are read
        last[:] = [session.target.model(mx.array(part)[None], cache=cache)[0, -1:]]
        return prefill.cache_arrays(cache)

    t0 = time.perf_counter()
    for _ in prefill.chunked(feed, ids):
        pass
    mx.eval(last)
    chunked_ms = (time.perf_counter() - t0) * 1e3
    return chunked_ms, one_pass_prefill_ms(session, n_tokens)


def run(args) -> int:
    """Run the parts named in ``args.parts`` (see ``draftpair long-chat --help``)."""
    from app.bench.contention import read_now
    from app.engine.session import Session

    session = Session()
    session.load_target(args.model)
    conversation(session, 1, False, 4)  # warm-up, not timed
    result: dict = {"model": args.model}
    out = (lambda *a: None) if args.json else print
    if "chat" in args.parts:
        r0 = read_now()
        result.update(chat_part(session, args))
        result["other_cores_chat"] = round(_other_cores(r0, read_now()), 2)
        out(f"model {args.model}; other processes used {result['other_cores_chat']} cores "
            "during the chat runs")
        out("turn | TTFT reuse off | TTFT reuse on | off/on | prompt_n off | prompt_n on | "
            "cache_n on")
        for r in result["turns"]:
            out(f"{r['turn']:>4} | {r['ttft_off_ms']:>11} ms | {r['ttft_on_ms']:>10} ms | "
                f"{r['ratio']:>5}x | {r['prompt_n_off']:>12} | {r['prompt_n_on']:>11} | "
                f"{r['cache_n_on']:>10}")
        out(f"outputs identical with and without reuse: {result['identical']}")
    if "stop" in args.parts:
        r0 = read_now()
        result["stop"] = [stop_to_idle(session, args.stop_tokens, d) for d in args.stop_delays]
        result["other_cores_stop"] = round(_other_cores(r0, read_now()), 2)
        for st in result["stop"]:
            out(f"Stop after {st['delay_s']:.1f} s of a {args.stop_tokens}-token prompt: idle "
                f"{st['stop_to_idle_ms']:.0f} ms later ({st['read_tokens']} tokens read, "
                f"{st['finish']}); other processes used {result['other_cores_stop']} cores")
    if "read" in args.parts:
        r0 = read_now()
        pairs = [full_read_ms(session, args.read_tokens) for _ in range(args.repeats)]
        result["read"] = {"tokens": args.read_tokens,
                          "chunked_ms": round(statistics.median(p[0] for p in pairs)),
                          "one_pass_ms": round(statistics.median(p[1] for p in pairs)),
                          "other_cores": round(_other_cores(r0, read_now()), 2)}
        rd = result["read"]
        out(f"reading a {rd['tokens']}-token prompt: {rd['chunked_ms']} ms in timed chunks, "
            f"{rd['one_pass_ms']} ms in one pass (median of {args.repeats}); other processes "
            f"used {rd['other_cores']} cores")
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


def chat_part(session, args) -> dict:
    runs: dict[bool, list[list[dict]]] = {False: [], True: []}
    for _ in range(args.repeats):
        for reuse in (False, True):
            runs[reuse].append(conversation(session, args.turns, reuse, args.max_tokens))
    identical = all(a["tokens"] == b["tokens"]
                    for x, y in zip(runs[False], runs[True], strict=True)
                    for a, b in zip(x, y, strict=True))

    def med(reuse: bool, turn: int, key: str) -> float:
        return statistics.median(r[turn - 1][key] for r in runs[reuse])

    table = []
    for turn in range(1, args.turns + 1):
        off, on = med(False, turn, "ttft_ms"), med(True, turn, "ttft_ms")
        table.append({"turn": turn, "ttft_off_ms": round(off), "ttft_on_ms": round(on),
                      "ratio": round(off / on, 2) if on else None,
                      "prompt_n_off": int(med(False, turn, "prompt_n")),
                      "prompt_n_on": int(med(True, turn, "prompt_n")),
                      "cache_n_on": int(med(True, turn, "cache_n"))})
    return {"turns": table, "identical": identical}

