"""Rules that keep the suite able to fail: the demo tests never skip where they must run
(make test, CI: tests/demo_gate.py), and no test skips because a hard dependency or the
project's own code does not import."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import pytest_runtest_setup
from tests.demo_gate import needs_demo


def test_a_missing_demo_skips_only_where_the_demo_tests_may_skip(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DRAFTPAIR_REQUIRE_DEMO", raising=False)
    assert needs_demo(True, "The demo target").name == "demo"
    skip = needs_demo(False, "The demo target")
    assert skip.name == "skipif" and "demo prepare" in skip.kwargs["reason"]
    for name, value in (("DRAFTPAIR_REQUIRE_DEMO", "1"), ("CI", "true")):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            fail = needs_demo(False, "The demo target")
            assert fail.name == "demo_missing"
            assert fail.args[0].startswith("The demo target is not present")
            assert needs_demo(True, "The demo target").name == "demo"


def test_a_demo_test_marked_missing_fails_at_set_up(request):
    request.node.add_marker(pytest.mark.demo_missing("The demo target is not present."))
    with pytest.raises(pytest.fail.Exception, match="demo target is not present"):
        pytest_runtest_setup(request.node)


def test_no_test_skips_for_a_hard_dependency_or_the_projects_own_code():
    # PySide6 (with shiboken6 and pyqtgraph) is a dependency, hypothesis a test dependency and
    # `app` this project: a test that cannot import them must fail, not skip
    hard = re.compile(r"importorskip\(\s*[\"'](PySide6|shiboken6|pyqtgraph|hypothesis|app)\b")
    demo_skip = re.compile(r"skipif\(.*demo", re.IGNORECASE)
    found = []
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        if path.name in ("demo_gate.py", Path(__file__).name):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if hard.search(line) or demo_skip.search(line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "skips that hide failures (use tests.demo_gate.needs_demo for the demo):\n" \
        + "\n".join(found)
