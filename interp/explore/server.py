"""Stopping an explorer's server at once (Ctrl-C), whatever a view is doing: both explorers use it, and it imports
nothing heavy, so the language-model explorer can serve its opening page before torch is loaded.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def children() -> list[int]:
    """The processes this one started (a kernel build's ninja), from /proc; none where there is no /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def stop_at_once(_signum, _frame) -> None:
    """Ctrl-C: the server ends now, whatever a view or a kernel build is doing, and so do the processes it
    started (a build's ninja stops its compilers); nothing is left half-written: a kernel build publishes
    its folder atomically, and the explorer writes no other file."""
    for pid in children():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    sys.stderr.write("\ninterp: explorer stopped\n")
    sys.stderr.flush()
    os._exit(130)
