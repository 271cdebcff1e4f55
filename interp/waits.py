"""What the explorer is waiting on, said in the page and on the terminal.

A view that takes more than ``AFTER_S`` seconds (held-out calibration, a kernel build, the effective
attention of a long scan) runs inside ``Waits.on(text)``: after ``AFTER_S`` the terminal gets one line
("interp: computing ...") and one more when it ends with the time it took; the page's status line, which
polls ``Waits.shown`` every half second, names every wait running for longer than ``AFTER_S`` and its
seconds so far. Nothing is said of a wait that ends sooner.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from ground.terminal import say

AFTER_S = 1.0


class Waits:
    def __init__(self, after_s: float = AFTER_S, terminal: bool = True):
        self.after_s, self.terminal = after_s, terminal
        self._lock = threading.Lock()
        self._now: dict[object, tuple[str, float]] = {}

    @contextmanager
    def on(self, text: str, terminal: bool = True):
        """Run the block as a wait named ``text``; ``terminal=False`` when the work prints its own progress."""
        key, started = object(), time.monotonic()
        with self._lock:
            self._now[key] = (text, started)
        timer = None
        if self.terminal and terminal:
            timer = threading.Timer(self.after_s, say, (f"{text}...",))
            timer.daemon = True
            timer.start()
        try:
            yield
        finally:
            with self._lock:
                del self._now[key]
            took = time.monotonic() - started
            if timer is not None:
                timer.cancel()
                if took >= self.after_s:
                    say(f"{text}: done in {took:.1f} s")

    def shown(self) -> str:
        """The waits running for longer than ``after_s``, oldest first, with their seconds so far; "" if none."""
        now = time.monotonic()
        with self._lock:
            waits = sorted(self._now.values(), key=lambda w: w[1])
        return "; ".join(f"{text}… {now - started:.0f} s" for text, started in waits if now - started >= self.after_s)


STATUS_STYLE = dict(position="sticky", top="0", zIndex="10", background="#fff3c4", padding="4px 8px", margin="0 6px",
                    borderRadius="4px")


def status_line() -> list:
    """The page's status line (hidden while nothing is slow) and the half-second tick that refreshes it."""
    from dash import dcc, html

    return [html.Div(id="status", style=dict(display="none")), dcc.Interval(id="tick", interval=500)]


def register_status(app, waits: Waits) -> None:
    """The status line's callback: the waits over a second, or hidden."""
    from dash import Input, Output

    @app.callback(Output("status", "children"), Output("status", "style"), Input("tick", "n_intervals"))
    def status(_ticks):
        shown = waits.shown()
        return (f"waiting: {shown}", STATUS_STYLE) if shown else ("", dict(display="none"))
