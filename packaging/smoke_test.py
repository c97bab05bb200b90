"""Smoke test of the frozen app (not part of `make test`: it needs a build first).

    python packaging/smoke_test.py [dist/DraftPair/draftpair] [--timeout 300]

Starts the frozen app offscreen with a throw-away profile, lets it open the demo pair, sends
one message, waits for the streamed reply and exits. Fails (non-zero) when the app does not
report a finished reply, exits badly, or its log holds an error marker (Friture
``scripts/smoke_test.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FATAL_MARKERS = (
    "Traceback (most recent call last)",
    "Fatal Python error",
    "Unexpected error",
    "QThread: Destroyed while thread",
    "Segmentation fault",
    "ModuleNotFoundError",
    "ImportError",
    "draftpair: error",
    "QObject: Cannot create children",
)
DEFAULT_EXE = Path(__file__).resolve().parent.parent / "dist" / "DraftPair" / "draftpair"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("exe", nargs="?", type=Path, default=DEFAULT_EXE)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    if not args.exe.exists():
        print(f"smoke: no frozen app at {args.exe}; build it first (packaging/README.md)")
        return 2
    profile = Path(tempfile.mkdtemp(prefix="draftpair-smoke-"))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", DRAFTPAIR_CONFIG_DIR=str(profile))
    started = time.monotonic()
    proc = subprocess.run(
        [str(args.exe), "gui", "--profile-dir", str(profile), "--smoke-test",
         "Fix the typo: The libary is open."],
        env=env, capture_output=True, text=True, timeout=args.timeout + 60,
    )
    log = proc.stdout + proc.stderr
    (profile / "smoke.log").write_text(log)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("SMOKE-RESULT "):
            result = json.loads(line.split(" ", 1)[1])
    markers = [m for m in FATAL_MARKERS if m in log]
    print(f"smoke: exit {proc.returncode} after {time.monotonic() - started:.0f} s; result {result}")
    if markers:
        print("smoke: FAILED, log has: " + ", ".join(markers))
    if proc.returncode != 0 or markers or not result or result.get("error"):
        print(f"smoke: log kept in {profile / 'smoke.log'}")
        return 1
    print("smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
