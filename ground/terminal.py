"""One line on the terminal's error stream, as every part of the toolkit says things outside a command's output."""
from __future__ import annotations

import sys


def say(text: str) -> None:
    """``interp: TEXT`` on stderr, at once (flushed: it reports waits and progress as they happen)."""
    print(f"interp: {text}", file=sys.stderr, flush=True)
