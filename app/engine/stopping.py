"""Stop strings across token boundaries, with streaming that never shows part of a stop string."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...] | list[str]):
        self.stops = [s for s in stops if s]
        self.maxlen = max((len(s) for s in self.stops), default=0)
        self.text = ""
        self.released = 0
        self.stopped = False

    def feed(self, segment: str) -> str:
        """Add decoded text; return the part that is safe to show now."""
        if self.stopped:
            return ""
        self.text += segment
        if not self.stops:
            return self._release(len(self.text))
        start = max(0, self.released - self.maxlen)
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            out = self._release(min(hits))
            self.text = self.text[: self.released]
            return out
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.text)), 0, -1):
                if self.text.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        return self._release(len(self.text) - hold)

    def flush(self) -> str:
        """Release held-back text at the end of generation (no stop string completed)."""
        if self.stopped:
            return ""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        upto = max(upto, self.released)
        out = self.text[self.released : upto]
        self.released = upto
        return out

    @property
    def final_text(self) -> str:
        return self.text[: self.released]
