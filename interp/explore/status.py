"""Both explorers' status line: what a slow view is waiting on (the state's ``waits``: held-out calibration, a
kernel build, the model on a long prompt), shown at the top of the page while it lasts, refreshed by a half-second
tick that the patching view's progress follows too (``interp/waits.py``).
"""
from __future__ import annotations

from ..waits import register_status, status_line
from .common import CLICKS
from .page import View

VIEW = View("status", {"status": lambda state, at: status_line()},
            lambda app, state: register_status(app, state.waits), lambda state: {("tick", "n_intervals"): CLICKS})
