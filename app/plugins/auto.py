"""Auto: every drafter the pair offers, the one expected to pay most chosen each round."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.kinds import KindPlugin

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext
    from app.engine.drafters.base import Drafter


class Auto(KindPlugin):
    name = "auto"
    label = "Automatic"
    share_word = "auto"
    explanation = ("Uses every drafter this pair has and picks, each step, the one expected "
                   "to write fastest, or none when guessing would not pay.")
    technical = ("auto (per round: the proposal source and width with the most expected "
                 "tokens per second, from acceptance learnt online and this computer's "
                 "measured costs; with trees 'on' a drafter that grows trees may propose a "
                 "tree when it is expected to pay more than its chain, 'flat' prices every "
                 "round as on a GPU, 'off' keeps chains)")
    default_width = 16  # the widest any member may draft
    default_choice = True  # suits every target: prompt lookup always runs
    combines = True  # its drafters are the other kinds' (app.engine.auto_build)
    stochastic = True  # its model members sample their proposals at T > 0
    aliases = ("automatic",)

    def make(self, ctx: DrafterContext) -> Drafter:
        raise NotImplementedError("the auto kind's source is built by the session")


PLUGIN = Auto()
