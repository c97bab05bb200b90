"""A draft kind is one plugin: a throwaway kind defined here, registered through the registry's
public API and nothing else, shows up in the CLI's choices, runs through ``generate``, the HTTP
server and the bench, is judged by the pairing check and offered by the GUI's pickers. The
fixture unregisters it, so the other test modules see the built-in kinds only."""

from __future__ import annotations

import json
from typing import Any

import mlx.core as mx
import pytest

from app import kinds
from app.engine.drafters.base import Drafter, Proposal
from tests.demo_gate import needs_demo

NAME = "test-fixed-token"
TOKEN = 5  # what the drafter always proposes


class FixedTokenDrafter(Drafter):
    """Proposes ``TOKEN`` at every position: usually wrong, so rounds reject and roll back."""

    adaptive_width = False  # every step a round: the kind is exercised, not skipped

    def __init__(self) -> None:
        self.n_proposed = 0

    def begin(self, prompt: list[int], sampling: Any) -> list[mx.array]:
        return []

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        self.n_proposed += k
        return Proposal(mx.array([TOKEN] * k, dtype=mx.uint32))

    def observe(self, committed, proposal, accepted, new_tokens, hidden=None) -> None:
        pass


class FixedTokenKind(kinds.KindPlugin):
    name = NAME
    label = "Fixed guess (test)"
    explanation = "Always guesses the same word."
    technical = "constant proposal"
    default_width = 2

    def target_findings(self, t, out) -> None:
        from app.checkpoints.pairing.report import NOTE

        out.add("fixed.note", NOTE, "This mode always guesses the same word.", str(t.path))

    def offer(self, t) -> str | None:
        return "Guesses one word over and over."

    def make(self, ctx) -> Drafter:
        return FixedTokenDrafter()


@pytest.fixture(scope="module")
def fixed_kind():
    with kinds.registered(FixedTokenKind()) as plugin:
        yield plugin
    assert NAME not in kinds.names()


def test_registration_is_reversible_and_refuses_duplicates():
    before = kinds.names()
    with kinds.registered(FixedTokenKind()):
        assert kinds.names() == (*before, NAME)
        with pytest.raises(ValueError, match="already registered"):
            kinds.register(FixedTokenKind())
    assert kinds.names() == before
    kinds.unregister(kinds.OFF)  # the built-in kinds stay
    assert kinds.names() == before


def _choices(parser, command: str, option: str) -> tuple[str, ...]:
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return tuple(next(a for a in sub._actions if option in a.option_strings).choices)


def test_cli_offers_the_kind_and_generate_runs_it(fixed_kind, tiny_models, capsys):
    from app.cli import build_parser, main

    parser = build_parser()
    for command, option in (("generate", "--draft-kind"), ("serve", "--draft-kind"),
                            ("bench", "--kinds"), ("check", "--kind")):
        assert NAME in _choices(parser, command, option), command
    args = ["generate", "--model", str(tiny_models.target), "--prompt",
            "The cat sat on the mat. The cat", "--max-tokens", "12", "--json"]
    assert main([*args, "--draft-kind", kinds.OFF]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--draft-kind", NAME]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["timings"]["draft_kind"] == NAME and done["timings"]["fallback"] is None
    assert done["timings"]["draft_rounds"] > 0
    assert done["tokens"] == plain["tokens"]  # greedy: the rejections change nothing


def test_server_accepts_and_runs_the_kind(fixed_kind, tiny_models):
    import urllib.request

    from app.server.runner import ServerConfig, ServerHandle

    handle = ServerHandle(ServerConfig(model=str(tiny_models.target), port=0))
    handle.start()
    try:
        assert handle.engine.info.kinds[NAME] is None  # listed, and it can run

        def ask(kind: str) -> dict:
            body = {"messages": [{"role": "user", "content": "The cat sat on the mat. The"}],
                    "max_tokens": 10, "temperature": 0,
                    "draftpair": {"draft_kind": kind, "allow_fallback": False,
                                  "return_tokens": True}}
            req = urllib.request.Request(handle.url + "/v1/chat/completions",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())

        plain, ours = ask(kinds.OFF), ask(NAME)
        assert ours["timings"]["draft_kind"] == NAME and ours["timings"]["draft_rounds"] > 0
        assert ours["draftpair"]["token_ids"] == plain["draftpair"]["token_ids"]
    finally:
        handle.stop()


def test_bench_lists_and_measures_the_kind(fixed_kind, tiny_models, tmp_path):
    from app.bench.runner import BenchConfig, draft_kinds, run_bench
    from tests.test_bench import _task, _write_suite

    assert NAME in draft_kinds()
    suite = _write_suite(tmp_path / "suite", [_task(max_tokens=8)])
    report = run_bench(BenchConfig(
        model=str(tiny_models.target), kinds=(NAME,), runs=1, temperatures=(0.0,),
        suite_path=str(suite), contention_threshold=1e9, peers=False, max_reruns=0))
    assert [c.name for c in report.conditions] == ["off", NAME]
    mine = [r for r in report.runs if r.condition == NAME]
    assert mine and not any(r.error for r in mine)
    assert all(r.draft_kind == NAME for r in mine)


def test_pairing_report_judges_and_suggests_the_kind(fixed_kind, tiny_models):
    from app.checkpoints.pairing import check, normalize_kind, suggest_drafts

    assert normalize_kind(NAME.upper()) == NAME
    report = check(tiny_models.target, None, kind=NAME)
    assert report.kind == NAME and report.works
    assert "fixed.note" in report.codes()
    assert check(tiny_models.target, tiny_models.draft, kind=NAME).blockers[0].code == (
        "kind.no_draft_model")
    sugg = suggest_drafts(tiny_models.target, entries=[])
    offered = [s for s in sugg.no_model_options if s.kind == NAME]
    assert offered and offered[0].reason == "Guesses one word over and over."


def test_gui_pickers_offer_the_kind(fixed_kind, qtbot, tmp_path, tiny_models):
    from app.checkpoints.store import Store
    from app.ui.chat_store import ChatStore
    from app.ui.main_window import AppContext, MainWindow
    from app.ui.settings import Settings, SettingsStore

    ctx = AppContext(SettingsStore(tmp_path / "settings.json"),
                     Settings(target=str(tiny_models.target), draft=""),
                     ChatStore(tmp_path / "chat.sqlite3"),
                     checkpoint_store=Store(data_dir=tmp_path / "data", hf_cache=tmp_path / "hf"),
                     autoload=False)
    w = MainWindow(ctx)
    qtbot.addWidget(w)
    w.show()
    try:
        section = w.chat.draft_section
        with qtbot.waitSignal(w.client.model_state, timeout=60_000):
            w.load_pair(str(tiny_models.target), "")
        qtbot.waitUntil(lambda: section.suggestions is not None, timeout=60_000)
        for combo in (w.chat.spec_combo, w.compare.kind_combo):
            i = combo.findData(NAME)
            assert i >= 0 and combo.itemText(i) == "Fixed guess (test)"
            assert combo.model().item(i).isEnabled()
        option = next(o for o in section.picker.options if o.kind == NAME)
        assert option.enabled and option.title == "Fixed guess (test)"
        assert section.picker.select(NAME)
    finally:
        w.close()
        ctx.chat_store.close()


def _demo_dflash_ready() -> bool:
    from app.demo.target import demo_target_ready
    from app.engine.drafters.dflash import DEMO_FOLDER
    from app.resources import resource_path

    return demo_target_ready() and (resource_path(DEMO_FOLDER) / "config.json").is_file()


@needs_demo(_demo_dflash_ready(), "The demo target or the shipped DFlash drafter")
def test_asking_whether_kinds_can_run_loads_nothing():
    """The state refresh after loading or unloading asks every kind; only a reply that uses a
    kind makes the Session load (and hold) its weights."""
    from app.demo.builtins import register_demo_models
    from app.engine.events import DoneEvent, GenerationRequest
    from app.engine.session import Session

    register_demo_models()
    s = Session()
    s.load_target("demo")
    dflash = kinds.for_folder({"architectures": ["DFlashDraftModel"]})
    assert dflash is not None and dflash.needs_taps
    reasons = s.available_kinds()
    assert reasons[dflash.name] is None and s.assets == {}  # the demo drafter can run: unloaded
    req = GenerationRequest(prompt="Hi", max_tokens=4, draft_kind=dflash.name,
                            allow_fallback=False)
    done = [e for e in s.generate(req) if isinstance(e, DoneEvent)][-1]
    assert done.finish_reason != "error", done.error
    assert s.assets.get(dflash.name) is not None  # loaded by the reply that used it
    s.unload_draft()
    assert dflash.name not in s.assets
    assert s.available_kinds()[dflash.name] is None
    assert dflash.name not in s.assets  # the refresh after unloading did not load it again


def test_a_kind_whose_engine_code_is_missing_is_named_by_the_check(tiny_models):
    from app.checkpoints.pairing import check

    class Missing(FixedTokenKind):
        name = "test-missing-runtime"
        technical = "Missing-Runtime"

        def engine_module(self) -> str | None:
            return "app.engine.drafters.no_such_drafter"

    with kinds.registered(Missing()):
        report = check(tiny_models.target, None, kind="test-missing-runtime")
    missing = [f for f in report.findings if f.code == "kind.runtime_missing"]
    assert missing and "cannot run Missing-Runtime drafting" in missing[0].message
    assert not report.works


def test_a_folder_for_a_kind_that_takes_none_is_refused_in_one_sentence(fixed_kind, tiny_models):
    from app.engine.session import Session
    from app.errors import user_message

    s = Session()
    s.load_target(tiny_models.target)
    with pytest.raises(kinds.KindRefused) as err:
        s.load_for(NAME, tiny_models.draft)
    assert user_message(err.value) == "Fixed guess (test) takes no draft folder."
    assert NAME not in s.assets


def test_bench_loads_the_draft_folder_for_any_kind_that_reads_one(tmp_path):
    """``bench --kinds dflash --draft-model X`` on a target that is not the demo loads X (the
    bench used to load a draft only when the full-model kind was measured)."""
    from app.bench.runner import BenchConfig, load_session, plan_conditions
    from tests import builders_dflash as bd

    target, folder = bd.make_pair(tmp_path, "2026")
    dflash = kinds.for_folder({"architectures": ["DFlashDraftModel"]})
    assert dflash is not None and not dflash.folder_fallback
    config = BenchConfig(model=str(target), draft_model=str(folder), kinds=(dflash.name,))
    session = load_session(config)
    assert session.draft_kind == dflash.name and session.assets[dflash.name].path == folder
    conditions, skipped = plan_conditions(session, config)
    assert dflash.name in [c.draft_kind for c in conditions] and not skipped
