"""No speculation: plain decoding, one target step per token."""

from __future__ import annotations

from app.kinds import OFF, KindPlugin


class Off(KindPlugin):
    name = OFF
    label = "Off"
    explanation = "Plain decoding: the model writes one token at a time."
    technical = "no speculation (target-only decoding)"
    default_width = 0
    proposes = False
    aliases = ("off",)


PLUGIN = Off()
