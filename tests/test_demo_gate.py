"""The demo tests never skip where they must run (make test, CI): tests/demo_gate.py."""

from __future__ import annotations

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
