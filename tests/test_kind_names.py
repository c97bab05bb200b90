"""No source file in ``app/`` outside the kind registry (``app/kinds/``) and the plugins
(``app/plugins/``) names a draft kind as a string literal.

How it checks: every ``app/**/*.py`` is parsed with ``ast``; every string constant in it
(``ast.Constant`` with a ``str`` value: literals, dict keys, defaults, the literal parts of
f-strings, docstrings) whose whole value equals a registered kind's name is collected with its
file. A docstring or message that merely mentions a kind in prose is a longer string and is not
collected; code that means a kind goes through ``app.kinds`` (``kinds.OFF`` for the kind that
turns speculation off, ``kinds.get(name)``, the plugin's attributes) instead.

A few literals spell the same word with another meaning; each is listed below with that
meaning and how many times it occurs in its file, so a new use of the word in those files
fails too, and a listed one that is gone makes the list stale (and fails) as well. "none" is
covered like the other names: where it means the kind the code says ``kinds.OFF``; the listed
ones are an acceptance rule, a rewind method, a tokenizer source, an OpenAI field value, a
precision, the width boxes' word for no fixed width, an MLX argument and OpenAI's
fill-in-the-middle field, which no registry could name for them.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from app import kinds

APP = Path(__file__).resolve().parents[1] / "app"
OWNERS = (APP / "kinds", APP / "plugins")

OTHER_MEANINGS: dict[tuple[str, str], tuple[int, str]] = {
    ("checkpoints/inspect.py", "dflash"): (1, "what a checkpoint folder is (KIND_DFLASH)"),
    ("checkpoints/dflash2_config.py", "dflash2"): (1, "a drafter folder's model_type"),
    ("checkpoints/dspark_config.py", "dspark"): (1, "a drafter folder's model_type"),
    ("checkpoints/eagle3_config.py", "eagle3"): (1, "how a drafter folder's config spells "
                                                   "the EAGLE-3 algorithm"),
    ("checkpoints/mtp_source.py", "mtp"): (1, "the head's sub-folder name"),
    ("checkpoints/pairing/load_check.py", "none"): (1, "a tokenizer source"),
    ("checkpoints/tokenizer_files.py", "none"): (1, "a tokenizer source"),
    ("demo/dflash_train.py", "none"): (1, "an MLX loss argument (reduction)"),
    ("demo/mtp_eval.py", "mtp"): (1, "a work sub-folder"),
    ("demo/mtp_export.py", "mtp"): (1, "a work sub-folder"),
    ("demo/mtp_train.py", "mtp"): (1, "a work sub-folder"),
    ("engine/drafters/mtp_load.py", "mtp"): (2, "the head's sub-folder name"),
    ("engine/models.py", "auto"): (3, "the precision chosen from the weights and backend"),
    ("engine/session.py", "auto"): (1, "the precision chosen from the weights and backend"),
    ("server/engine_thread.py", "auto"): (1, "the precision chosen from the weights and backend"),
    ("ui/chat_toolbar.py", "auto"): (1, "the width box's word for no fixed width"),
    ("ui/compare_view.py", "auto"): (1, "the width box's word for no fixed width"),
    ("engine/events.py", "none"): (1, "the acceptance rule of plain decoding (RULE_NONE)"),
    ("engine/rollback.py", "none"): (1, "a rewind method"),
    ("server/protocol.py", "none"): (1, "an OpenAI tool_choice value"),
    ("server/protocol.py", "suffix"): (2, "OpenAI's fill-in-the-middle completions field"),
}


def kind_literals(source: str, names: set[str]) -> Counter[str]:
    """How often each of ``names`` occurs as a whole string constant in ``source``."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found[node.value] += 1
    return found


def test_the_scan_finds_literals_and_ignores_prose():
    names = {"mtp", "none"}
    code = 'x = "mtp"\nd = {"none": 1}\ny = f"{x}none"\n"""Uses mtp or none."""\n'
    assert kind_literals(code, names) == Counter({"mtp": 1, "none": 2})


def test_no_kind_name_outside_the_registry_and_the_plugins():
    names = set(kinds.names())
    assert {"none", "prompt-lookup", "full-model", "mtp", "dflash"} <= names
    found: dict[tuple[str, str], int] = {}
    for path in sorted(APP.rglob("*.py")):
        if any(owner in path.parents for owner in OWNERS):
            continue
        rel = path.relative_to(APP).as_posix()
        for name, n in kind_literals(path.read_text(encoding="utf-8"), names).items():
            found[(rel, name)] = n
    expected = {key: n for key, (n, _why) in OTHER_MEANINGS.items()}
    unexpected = {k: n for k, n in found.items() if expected.get(k) != n}
    stale = {k: n for k, n in expected.items() if found.get(k) != n}
    assert not unexpected, f"kind names as literals (ask app.kinds instead): {unexpected}"
    assert not stale, f"listed literals that changed or are gone: {stale}"
