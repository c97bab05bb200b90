"""The window's time to first token counts from Send: a reply queued behind another one
reports the wait (real engine worker thread, tiny checkpoints)."""

from __future__ import annotations

import time

from app.engine.events import GenerationRequest
from app.ui.live import LiveRun
from app.ui.worker import EngineClient, Job


class FirstTokenLive(LiveRun):
    """Notes when the worker hands over the first token (on the worker thread)."""

    first_token_at: float | None = None

    def on_token(self, text: str, from_draft: bool, counts: bool = True) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        super().on_token(text, from_draft, counts)


def test_ttft_counts_from_send_including_the_wait_behind_another_reply(qtbot, tiny_models):
    client = EngineClient()
    try:
        with qtbot.waitSignal(client.model_state, timeout=60_000):
            client.load(str(tiny_models.target))
        ahead = Job(request=GenerationRequest(prompt="Once upon a time", max_tokens=48))
        live = FirstTokenLive()
        job = Job(request=GenerationRequest(prompt="The cat sat on", max_tokens=6,
                                            draft_kind="prompt-lookup"), live=live)
        finished: dict[int, object] = {}
        client.job_finished.connect(lambda job_id, done: finished.__setitem__(job_id, done))
        client.submit(ahead)
        before = time.perf_counter()
        client.submit(job)  # Send while the engine still writes the first reply
        sent = time.perf_counter()
        assert job.request.submitted_at is not None
        assert before <= job.request.submitted_at <= sent
        qtbot.waitUntil(lambda: job.id in finished and ahead.id in finished, timeout=60_000)
        done = finished[job.id]
        assert done.finish_reason in ("stop", "length") and live.first_token_at is not None
        assert done.timings.ttft_ms >= (live.first_token_at - sent) * 1e3
        # the wait behind the first reply is in it: at least that reply's decoding
        assert done.timings.ttft_ms >= finished[ahead.id].timings.predicted_ms
    finally:
        assert client.shutdown()
