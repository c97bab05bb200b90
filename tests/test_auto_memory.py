"""Auto loads a drafter only where it fits: the estimate of what loading it takes (weights in
the dtype drafters load in, its own cache at the request's length) against the memory free."""

from __future__ import annotations

from tests.demo_gate import needs_demo


def _demo_ready() -> bool:
    from app.demo.target import demo_target_ready
    from app.engine.drafters.dflash import DEMO_FOLDER
    from app.resources import resource_path

    return demo_target_ready() and (resource_path(DEMO_FOLDER) / "config.json").is_file()


@needs_demo(_demo_ready(), "The demo target or the shipped DFlash drafter")
def test_a_member_that_would_not_fit_is_left_out_with_its_size(monkeypatch):
    from app.engine import auto_build
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session
    from app.plugins.auto import PLUGIN as AUTO
    from app.plugins.dflash import PLUGIN as DFLASH
    from app.resources import resource_path

    s = Session()
    s.load_target("demo")
    need = auto_build.member_bytes(s, DFLASH, 1000)
    weights = (resource_path("demo-dflash") / "model.safetensors").stat().st_size
    # float16 weights loaded beside a float32 target take twice their file size
    assert need is not None and need >= 2 * weights * 0.95
    # a cache of its own grows with the length
    assert auto_build.member_bytes(s, DFLASH, 4000) >= need
    # with a little less free memory than it needs (and the reserve), it is left out, saying so
    monkeypatch.setattr(auto_build, "_free_bytes",
                        lambda: need + auto_build.MIN_FREE_BYTES - 2**20)
    req = GenerationRequest(prompt="Say hi.", max_tokens=8, draft_kind=AUTO.name)
    done = [e for e in s.generate(req) if isinstance(e, DoneEvent)][-1]
    assert done.finish_reason != "error", done.error
    why = done.timings.sources_left_out.get(DFLASH.name, "")
    assert why.startswith("it needs about ") and "kept free for the reply, and only" in why, why
    assert DFLASH.name not in s.assets or s.assets[DFLASH.name] is None


def test_no_estimate_where_the_folder_is_not_known(tiny_models):
    from app.engine import auto_build
    from app.engine.session import Session
    from app.plugins.dflash import PLUGIN as DFLASH

    s = Session()
    s.load_target(str(tiny_models.target))
    assert auto_build.member_bytes(s, DFLASH, 100) is None
