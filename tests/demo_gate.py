"""Tests of the built-in demo pair: skipped where it is not prepared, except where the demo
tests must run (``make test`` and CI), where a missing demo fails them instead.

``make test`` prepares the demo first and fails loudly when it cannot; it also sets
``DRAFTPAIR_REQUIRE_DEMO=1`` (CI services set ``CI``), so a demo that is still missing is a
failure here, never a silent skip.
"""

from __future__ import annotations

import os

import pytest

PREPARE = "run `draftpair demo prepare` (or `make demo`)"


def demo_required() -> bool:
    """True where the demo tests must run rather than skip."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return os.environ.get("DRAFTPAIR_REQUIRE_DEMO") == "1" or ci


def needs_demo(ready: bool, what: str) -> pytest.MarkDecorator:
    """The mark for a test that needs ``what`` of the demo (``ready``: it is present)."""
    if ready:
        return pytest.mark.demo
    if demo_required():
        return pytest.mark.demo_missing(
            f"{what} is not present, and this run must not skip the demo tests: {PREPARE}.")
    return pytest.mark.skipif(True, reason=f"{what} not present: {PREPARE}")
