"""Putting the auto kind together for one request: every drafter the pair offers that can
run and fits in memory, each measured on this machine, behind one ``AutoSource``.

The members are the kinds the registry lists that propose and do not combine others
themselves, so a kind registered later (suffix decoding, a new head) joins auto with no
change here. A kind that cannot run, does not fit in memory or fails to load is left out,
with its reason in a notice and in ``Timings.sources_left_out``.

Trees follow the request's ``trees``: "off" (the default) keeps every member to chains; "on"
lets the members whose kind grows trees (``KindPlugin.grows_trees``) propose tree rounds where
the policy values them above their chains, a plain step and the other members, priced by this
machine's table; "flat" prices the whole choice as on a GPU (``_policy``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING

from app import kinds
from app.engine import session_warmup, tree_build
from app.engine.auto_costs import (
    CatchUp,
    VerifyCost,
    catch_up_cost,
    linear_verify_cost,
    remembered,
)
from app.engine.auto_policy import AutoPolicy
from app.engine.auto_source import AutoSource, Member
from app.engine.events import GenerationRequest, NoticeEvent, StatusEvent
from app.engine.models import LoadedModel, make_cache
from app.engine.verify import choose_rule
from app.engine.width import DEFAULT_VERIFY_SLOPE
from app.errors import DraftPairError, user_message

if TYPE_CHECKING:
    from app.engine.session import Session

MIN_FREE_BYTES = 512 * 2**20  # memory left free after loading a member's weights
# a copy (prompt lookup, suffix decoding) may run this far: where the text repeats it is
# right for long stretches, and the choice cuts each copy where its evidence says the rest
# would not pay (the widest pass a calibration table measures is 17 tokens)
COPY_WIDTH = 16


@dataclasses.dataclass
class Built:
    source: AutoSource | None  # None: no member could run (or the request was stopped)
    left_out: dict[str, str]  # kind -> why, in plain words
    warmup_s: float = 0.0  # spent measuring this machine (first use of a drafter only)


def members_of() -> tuple[kinds.KindPlugin, ...]:
    """The kinds auto may combine: those that propose, auto-like kinds aside."""
    return tuple(p for p in kinds.drafting() if not p.combines)


def _free_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # no reading: assume it fits, a failed load says otherwise
        return None


def _why_not(session: Session, plugin: kinds.KindPlugin, req: GenerationRequest,
             prompt: list[int]) -> str | None:
    reason = session.unavailable(plugin.name, req)
    if reason is not None:
        return reason
    held = session.assets.get(plugin.name)
    if plugin.draft_is_lm and isinstance(held, LoadedModel) and max(prompt) >= held.embedding_rows:
        return "the prompt holds token ids the draft model does not have"
    if held is None:
        free = _free_bytes()
        need = member_bytes(session, plugin, len(prompt) + req.max_tokens)
        if free is not None and free < (need or 0) + MIN_FREE_BYTES:
            if need:
                return (f"it needs about {need / 2**20:.0f} MiB, plus "
                        f"{MIN_FREE_BYTES / 2**20:.0f} MiB kept free for the reply, and only "
                        f"{free / 2**20:.0f} MiB of memory are free")
            return "there is not enough free memory to load it"
    return None


def member_bytes(session: Session, plugin: kinds.KindPlugin, context: int) -> int | None:
    """What loading a member not yet loaded would take: its weights (in the dtype drafters
    load in) and its own cache at ``context`` tokens, from the folder it would load (the
    drafter shipped for the demo target; None where that folder is not known beforehand)."""
    from app.checkpoints.inspect import inspect_checkpoint
    from app.engine.drafters.demo_folders import shipped_for_demo

    target = session.target
    if target is None or not plugin.demo_draft:
        return None
    folder = shipped_for_demo(target, plugin.demo_draft)
    if folder is None:
        return None
    try:
        t_info = inspect_checkpoint(target.path)
        d_info = inspect_checkpoint(folder)
    except Exception:  # noqa: BLE001 - no reading: the load itself says whether it fits
        return None
    widen = 2 if d_info.dtype in ("float16", "bfloat16") and t_info.dtype == "float32" else 1
    own = plugin.draft_kv_bytes(t_info, d_info, context) or 0
    return int(d_info.weight_bytes * widen + own)


def build(session: Session, kind: str, req: GenerationRequest, prompt: list[int],
          cancel: threading.Event | None,
          ) -> Generator[StatusEvent | NoticeEvent, None, Built]:
    """The request's auto source, each member loaded and measured (progress as events)."""
    members: list[Member] = []
    left_out: dict[str, str] = {}
    warmup_s = 0.0
    for plugin in members_of():
        if cancel is not None and cancel.is_set():
            return Built(None, left_out, warmup_s)
        reason = _why_not(session, plugin, req, prompt)
        if reason is not None:
            left_out[plugin.name] = reason.rstrip(".")
            continue
        sub = dataclasses.replace(req, draft_kind=plugin.name, draft_width=None)
        try:
            drafter = session.make_drafter(sub)
        except (DraftPairError, MemoryError, OSError, ValueError) as exc:
            left_out[plugin.name] = user_message(exc).rstrip(".")
            continue
        if drafter is None:
            continue
        eager = not plugin.stochastic
        width = max(plugin.default_width, COPY_WIDTH) if eager else plugin.default_width
        measured = yield from session_warmup.warm_up(session, plugin.name, drafter, width,
                                                     context=len(prompt), cancel=cancel)
        warmup_s += session.last_warmup_s
        drafter.step_cost = measured["draft_cost"]
        rule = choose_rule(req.sampling, stochastic_draft=plugin.stochastic)
        members.append(Member(plugin.name, drafter, rule, width, eager=eager,
                              trees=plugin.grows_trees and req.trees != "off"))
    if not members:
        return Built(None, left_out, warmup_s)
    policy = _policy(session, req, members)
    rule = choose_rule(req.sampling, stochastic_draft=any(
        kinds.get(m.name).stochastic for m in members))
    yield NoticeEvent(kind, describe_members([m.name for m in members], left_out))
    return Built(AutoSource(members, policy, rule=rule, kind=kind), left_out, warmup_s)


def _policy(session: Session, req: GenerationRequest, members: list[Member]) -> AutoPolicy:
    """The request's choice: priced by this machine's table, or with ``trees="flat"`` by a
    flat one (a pass over up to 64 tokens costing one step, as on a GPU: a measurement of
    what auto would choose there, chains and trees alike, step times not learnt)."""
    flat = req.trees == "flat"
    cal = session.calibration
    # the session's table as it is at each step: a row measured at the reply's own context
    # before its first token (``session_warmup.reach``) prices the reply's rounds at once
    verify_cost: VerifyCost = remembered(
        tree_build.flat_cost() if flat
        else (lambda n, c: (session.calibration or cal).verify_cost(n, c)) if cal is not None
        else linear_verify_cost(DEFAULT_VERIFY_SLOPE))
    # a drafter that catches up pays a longer first pass after the steps it sat out
    widest = (max(max(sizes) for sizes in cal.sizes) if cal is not None and not flat
              else 1 << 20)
    catch_up: dict[str, CatchUp] = {
        m.name: catch_up_cost(m.drafter.step_cost, m.width + 1 if m.drafter.block else 1,
                              verify_cost, widest)
        for m in members if m.drafter.catches_up}
    trees = frozenset(m.name for m in members if m.trees)
    if not flat:
        session.restore_auto_record([m.name for m in members])
    again = False
    if trees:
        assert session.target is not None
        again = tree_build.second_pass(session.target, make_cache(session.target))
    return AutoPolicy({m.name: m.width for m in members}, verify_cost=verify_cost,
                      draft_cost={m.name: m.drafter.cost for m in members},
                      evidence=session.auto_memory.for_chat(req.conversation),
                      catch_up=catch_up, trees=trees, tree_host=0.0 if flat else tree_build.ONE_PASS_OVERHEAD,
                      second_pass=again, learn_time=not flat,
                      history=None if flat else session.auto_memory.history(req.sampling),
                      step_ms_at=(lambda c: (session.calibration or cal).step_ms(c))
                      if cal is not None and not flat else None,
                      host=session.auto_memory.host(req.sampling))


def unavailable(session: Session, req: GenerationRequest | None) -> str | None:
    """Why auto cannot run (None when at least one of its members can)."""
    reasons = [session.unavailable(p.name, req) for p in members_of()]
    if any(r is None for r in reasons):
        return None
    return "no drafter of this pair can run"


def describe_members(used: list[str], left_out: dict[str, str]) -> str:
    """One plain sentence: which drafters auto uses and which it left out, and why."""
    words = "Auto speculation uses " + ", ".join(kinds.label(n) for n in used)
    if left_out:
        words += "; left out: " + "; ".join(f"{kinds.label(n)} ({why})"
                                            for n, why in left_out.items())
    return words + "."
