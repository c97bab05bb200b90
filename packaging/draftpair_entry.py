"""Frozen-app entry point: the same CLI dispatcher (no command = the desktop app)."""

import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    from app.cli import main

    sys.exit(main())
